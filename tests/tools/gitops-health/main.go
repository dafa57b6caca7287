// gitops-health reads, on stdin, a JSON object {"argocd": {"<group>/<Kind>": "<health.lua>"},
// "objects": [...]} and prints, for each object in order, one JSON line with what three GitOps
// tools' own code makes of it:
//
//   - kstatus: sigs.k8s.io/cli-utils' status.Compute, the rules Flux's kustomize-controller waits
//     by (and kpt);
//   - argocd: Argo CD's Lua engine (util/lua) running the health script given for the object's
//     group and Kind as Argo CD runs one from argocd-cm's resource.customizations (the standard
//     libraries off, as for any script that is not built in); null when none is given;
//   - fleet: wrangler's summary.Summarize, which Fleet's agent judges a bundle's resources by
//     (Fleet keeps an internal copy of this package; IsReady is what it checks).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/rancher/wrangler/v3/pkg/summary"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type input struct {
	ArgoCD  map[string]string `json:"argocd"`
	Objects []json.RawMessage `json:"objects"`
}

type kstatusVerdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type argoVerdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

type fleetVerdict struct {
	Ready         bool     `json:"ready"`
	State         string   `json:"state"`
	Error         bool     `json:"error"`
	Transitioning bool     `json:"transitioning"`
	Message       []string `json:"message"`
}

type verdict struct {
	Kstatus kstatusVerdict `json:"kstatus"`
	ArgoCD  *argoVerdict   `json:"argocd"`
	Fleet   fleetVerdict   `json:"fleet"`
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		fail("reading {\"argocd\": ..., \"objects\": [...]} on stdin: %v", err)
	}
	overrides := lua.ResourceHealthOverrides{}
	for key, script := range in.ArgoCD {
		overrides[key] = v1alpha1.ResourceOverride{HealthLua: script}
	}
	out := json.NewEncoder(os.Stdout)
	for i, rawObject := range in.Objects {
		// Unstructured's own decoding: integers stay int64, which kstatus' generation check needs
		// (encoding/json alone would give float64 and an error).
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(rawObject); err != nil {
			fail("object %d: %v", i, err)
		}
		var v verdict
		res, err := status.Compute(u.DeepCopy())
		if err != nil {
			fail("object %d (%s %s): kstatus: %v", i, u.GetKind(), u.GetName(), err)
		}
		v.Kstatus = kstatusVerdict{Status: res.Status.String(), Message: res.Message}
		health, err := overrides.GetResourceHealth(u.DeepCopy())
		switch {
		case err != nil:
			v.ArgoCD = &argoVerdict{Error: err.Error()}
		case health != nil:
			v.ArgoCD = &argoVerdict{Status: string(health.Status), Message: health.Message}
		}
		s := summary.Summarize(u.DeepCopy())
		v.Fleet = fleetVerdict{
			Ready:         s.IsReady(),
			State:         s.State,
			Error:         s.Error,
			Transitioning: s.Transitioning,
			Message:       append([]string{}, s.Message...),
		}
		if err := out.Encode(v); err != nil {
			fail("writing: %v", err)
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gitops-health: "+format+"\n", args...)
	os.Exit(1)
}
