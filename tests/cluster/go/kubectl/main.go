// kubectl for the local cluster and the scripts, built from the same Kubernetes release as the
// cluster (a fresh Debian machine has none, and Debian's kubernetes-client is 1.20).
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
