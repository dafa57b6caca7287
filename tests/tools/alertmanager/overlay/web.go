// Replaces github.com/prometheus/alertmanager/ui/web.go in the build (go build -overlay): the module
// as the proxy serves it lacks the web UI's compiled assets (ui/app/dist, built by npm in a
// release), which web.go embeds. The tests use only the v2 API, so the UI serves nothing.
package ui

import "github.com/prometheus/common/route"

// Register adds no route: no UI.
func Register(_ *route.Router) {}
