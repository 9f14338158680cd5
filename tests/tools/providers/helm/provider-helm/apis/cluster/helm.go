/*
Copyright 2020 The Crossplane Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package cluster contains Kubernetes API for the Helm provider.
package cluster

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/crossplane-contrib/provider-helm/apis/cluster/release/v1alpha1"
	"github.com/crossplane-contrib/provider-helm/apis/cluster/release/v1beta1"
	helmv1alpha1 "github.com/crossplane-contrib/provider-helm/apis/cluster/v1alpha1"
	helmv1beta1 "github.com/crossplane-contrib/provider-helm/apis/cluster/v1beta1"
)

func init() {
	// Register the types with the Scheme so the components can map objects to GroupVersionKinds and back
	AddToSchemes = append(AddToSchemes,
		helmv1alpha1.AddToScheme,
		helmv1beta1.AddToScheme,
		v1alpha1.AddToScheme,
		v1beta1.AddToScheme,
	)
}

// AddToSchemes may be used to add all resources defined in the project to a Scheme
var AddToSchemes runtime.SchemeBuilder

// AddToScheme adds all Resources to the Scheme
func AddToScheme(s *runtime.Scheme) error {
	return AddToSchemes.AddToScheme(s)
}
