// sdp-kube: one binary for the Kubernetes components of make cluster, all from one release
// (k8s.io/kubernetes v1.37.2, its staging modules at v0.37.2, etcd at the version that release is
// tested with). Shared packages compile once and the whole links once, instead of seven builds.
//
// The component is chosen by the name the binary is run under (a symlink: kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl, etcd), or by the first
// argument when run as sdp-kube: `sdp-kube kubelet --config ...`. Each component's main is
// reproduced from its own cmd/<name>/<name>.go in the release (the same side-effect imports).
// `sdp-kube cri-clean ENDPOINT` (cri.go) removes every pod sandbox through the CRI for make
// cluster-down; `sdp-kube podresources SOCKET` (podresources.go) asks the kubelet's pod-resources
// API for make test-cluster.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // kube-apiserver and kube-controller-manager: CronJob time zones

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var components = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
	"kubectl": func() int {
		// as cmd/kubectl: the verbosity is parsed early, errors pretty-printed
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return 0
	},
	"etcd":         func() int { etcdmain.Main(os.Args); return 0 },
	"cri-clean":    func() int { return criClean(os.Args[1:]) },
	"podresources": func() int { return podResources(os.Args[1:]) },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := components[name]; !ok && len(os.Args) > 1 {
		if _, ok := components[os.Args[1]]; ok {
			name = os.Args[1]
			os.Args = os.Args[1:] // the component sees its own name as argv[0]
		}
	}
	run, ok := components[name]
	if !ok {
		names := make([]string, 0, len(components))
		for n := range components {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "sdp-kube: run as one of %s (a symlink of that name, or `sdp-kube NAME ARGS...`)\n",
			strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run())
}
