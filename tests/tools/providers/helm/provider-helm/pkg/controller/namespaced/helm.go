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

package cluster

import (
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/crossplane-contrib/provider-helm/pkg/controller/namespaced/config"
	"github.com/crossplane-contrib/provider-helm/pkg/controller/namespaced/release"
)

// Setup creates all Helm controllers with the supplied logger and adds them
// to the supplied manager.
func Setup(mgr ctrl.Manager, o controller.Options, timeout time.Duration) error {
	for _, setup := range []func(ctrl.Manager, controller.Options, time.Duration) error{
		config.Setup,
		release.Setup,
	} {
		if err := setup(mgr, o, timeout); err != nil {
			return err
		}
	}
	return nil
}

// SetupGated creates all controllers with the supplied logger and adds them to
// the supplied manager gated.
func SetupGated(mgr ctrl.Manager, o controller.Options, timeout time.Duration) error {
	for _, setup := range []func(ctrl.Manager, controller.Options, time.Duration) error{
		config.SetupGated,
		release.SetupGated,
	} {
		if err := setup(mgr, o, timeout); err != nil {
			return err
		}
	}
	return nil
}
