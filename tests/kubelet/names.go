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

// The plugin sockets' names (core/src/endpoint/endpoint_socket.c): "<tag>-<h>-<n>.sock", <h> the 30-bit
// FNV-1a hash (xor-folded) of a key (the resource name, or a word several endpoints share) and
// <n> a per-process counter, each 6 base32hex digits; at most SocketNameMax bytes, so a kubelet
// directory of at most SocketDirMax bytes holds them (sun_path: 108 bytes with the NUL).
const (
	HyperlightSocketTag = "hl"
	KataSocketTag       = "kata"
	SocketNameMax       = 23
	SocketDirMax        = 108 - 1 - SocketNameMax - 1
)

const base32hex = "0123456789abcdefghijklmnopqrstuv"

// SocketPrefix is the prefix of every socket of key: "kata-pp49l5" for nvidia.com/gpu.
func SocketPrefix(tag, key string) string {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	h = ((h >> 30) ^ h) & 0x3fffffff
	b := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		b[i] = base32hex[h&31]
		h >>= 5
	}
	return tag + "-" + string(b)
}

// SocketRe matches exactly the socket names of prefix; the counter is the submatch.
func SocketRe(prefix string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `-([0-9a-v]{6})\.sock$`)
}

// IsSocketOf reports whether name is one of prefix's socket names.
func IsSocketOf(name, prefix string) bool {
	return SocketRe(prefix).MatchString(name)
}
