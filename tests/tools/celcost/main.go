// Command celcost checks Crossplane XRDs (and plain CRDs) the way the Kubernetes API server checks a CRD on
// create: the XRD is converted to its CRD with Crossplane's own xcrd code (through crank's exported
// cmd/crank/common/crd.ConvertToCRDs), and the CRD is run through apiextensions-apiserver's
// ValidateCustomResourceDefinition, which compiles every x-kubernetes-validations rule and enforces the CEL
// cost budget (the per-rule StaticEstimatedCostLimit and the CRD-wide StaticEstimatedCRDCostLimit) along with
// structural-schema checks.
//
// Usage: celcost FILE... ; prints every error and exits 1 if any CRD is invalid, 2 on a usage or read error.
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	un "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/crossplane/crossplane/v2/cmd/crank/common/crd"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: celcost XRD_OR_CRD.yaml...")
		os.Exit(2)
	}

	failed := false
	for _, path := range os.Args[1:] {
		n, err := check(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		if n > 0 {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// check validates every CRD derived from the object in path and returns how many errors it found.
func check(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	u := &un.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		return 0, fmt.Errorf("cannot parse YAML: %w", err)
	}
	crds, err := crd.ConvertToCRDs([]*un.Unstructured{u})
	if err != nil {
		return 0, err
	}
	if len(crds) == 0 {
		return 0, fmt.Errorf("no XRD or CRD in file (kind %q)", u.GetKind())
	}

	errs := 0
	for _, v1crd := range crds {
		// What the API server does before validating a new CRD: apply the v1 defaults, convert to the
		// internal type, and (PrepareForCreate) record the storage version as stored.
		extv1.SetObjectDefaults_CustomResourceDefinition(v1crd)
		internal := &apiextensions.CustomResourceDefinition{}
		if err := extv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1crd, internal, nil); err != nil {
			return 0, fmt.Errorf("cannot convert CRD %q: %w", v1crd.GetName(), err)
		}
		// xcrd makes the XRD the CRD's controller owner; offline the XRD has no UID, which the API server
		// would have filled in, so drop the reference rather than report it.
		internal.OwnerReferences = nil
		internal.Status = apiextensions.CustomResourceDefinitionStatus{}
		for _, v := range internal.Spec.Versions {
			if v.Storage {
				internal.Status.StoredVersions = append(internal.Status.StoredVersions, v.Name)
			}
		}

		list := validation.ValidateCustomResourceDefinition(context.Background(), internal)
		for _, e := range list {
			fmt.Printf("[x] %s: %s\n", internal.GetName(), e.Error())
		}
		if len(list) == 0 {
			fmt.Printf("[✓] %s: valid, every CEL rule within the cost budget\n", internal.GetName())
		}
		errs += len(list)
	}
	return errs, nil
}
