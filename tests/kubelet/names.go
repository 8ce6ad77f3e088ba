package kubelet

import (
	"regexp"
	"strings"
)

// Constants of the device plugin API v1beta1 (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1).
const (
	APIVersion     = "v1beta1"
	Healthy        = "Healthy"
	Unhealthy      = "Unhealthy"
	KubeletSocket  = "kubelet.sock"
	CheckpointFile = "kubelet_internal_checkpoint"
	// PreStartContainerTimeout is kubelet's KubeletPreStartContainerRPCTimeoutInSecs.
	PreStartContainerTimeoutSecs = 30
)

// SupportedVersions is kubelet's api.SupportedVersions.
var SupportedVersions = []string{APIVersion}

// Kubelet's error formats (pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go).
const (
	errUnsupportedVersion       = "requested API version %q is not supported by kubelet. Supported version is %q"
	errInvalidResourceName      = "the ResourceName %q is invalid"
	errFailedToDialDevicePlugin = "failed to dial device plugin:"
)

var (
	qualifiedNameRegexp = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	dns1123Subdomain    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// IsExtendedResourceName mirrors k8s.io/kubernetes/pkg/apis/core/v1/helper.IsExtendedResourceName:
// the name is not a native resource (it has a '/' and no "kubernetes.io/"), does not start with
// "requests.", and "requests."+name is a qualified name.
func IsExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") {
		return false
	}
	if strings.HasPrefix(name, "requests.") {
		return false
	}
	return isQualifiedName("requests." + name)
}

// isQualifiedName mirrors k8s.io/apimachinery/pkg/util/validation.IsQualifiedName.
func isQualifiedName(value string) bool {
	parts := strings.Split(value, "/")
	var name string
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		prefix := parts[0]
		name = parts[1]
		if prefix == "" || len(prefix) > 253 || !dns1123Subdomain.MatchString(prefix) {
			return false
		}
	default:
		return false
	}
	return name != "" && len(name) <= 63 && qualifiedNameRegexp.MatchString(name)
}

func versionSupported(v string) bool {
	for _, s := range SupportedVersions {
		if s == v {
			return true
		}
	}
	return false
}
