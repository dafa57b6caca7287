// kstatus reads a JSON array of Kubernetes objects on stdin and prints, for each in order, what
// cli-utils' kstatus (the rules Flux's health checks and kpt judge by) computes of it, as a JSON
// line: {"status":"Current|InProgress|Failed|...","message":"..."}.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	var objects []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&objects); err != nil {
		fail("reading a JSON array of objects on stdin: %v", err)
	}
	out := json.NewEncoder(os.Stdout)
	for i, raw := range objects {
		// Unstructured's own decoding: integers stay int64, which kstatus' generation check needs
		// (encoding/json alone would give float64 and an error).
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			fail("object %d: %v", i, err)
		}
		res, err := status.Compute(u)
		if err != nil {
			fail("object %d (%s %s): %v", i, u.GetKind(), u.GetName(), err)
		}
		if err := out.Encode(verdict{Status: res.Status.String(), Message: res.Message}); err != nil {
			fail("writing: %v", err)
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kstatus: "+format+"\n", args...)
	os.Exit(1)
}
