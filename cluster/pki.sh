#!/bin/bash
# The certificates and kubeconfigs of make cluster, made with openssl, laid out as kubeadm
# does: three CAs (Kubernetes, etcd, front proxy), a serving and a client certificate for every
# connection, the service-account key pair. RSA 2048, valid 365 days.
#
#   cluster/pki.sh DIR NODE_NAME NODE_IP SERVICE_IP
#
# DIR/pki: ca, etcd-ca, front-proxy-ca, etcd-server, etcd-peer, apiserver-etcd-client,
# apiserver (SANs: kubernetes, kubernetes.default, kubernetes.default.svc,
# kubernetes.default.svc.cluster.local, localhost, NODE_NAME; IPs SERVICE_IP, NODE_IP,
# 127.0.0.1), apiserver-kubelet-client (system:masters), front-proxy-client, kubelet (serving:
# NODE_NAME, NODE_IP), sa.key/sa.pub. DIR/*.conf: the kubeconfigs of admin (kubernetes-admin,
# system:masters), kubelet (system:node:NODE_NAME in system:nodes, for the Node authorizer and
# NodeRestriction), controller-manager (system:kube-controller-manager), scheduler
# (system:kube-scheduler), kube-proxy (system:kube-proxy, bound to system:node-proxier by the
# API server's bootstrap policy). Each certificate is checked against its CA.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 DIR NODE_NAME NODE_IP SERVICE_IP" >&2; exit 2; }
dir=$1 node=$2 ip=$3 svc=$4
pki=$dir/pki
mkdir -p "$pki"
chmod 700 "$pki"
days=365
server=https://$ip:6443

key() { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/$1.key" 2>/dev/null; chmod 600 "$pki/$1.key"; }

ca() { # NAME CN
	key "$1"
	openssl req -x509 -new -key "$pki/$1.key" -subj "/CN=$2" -days $((days * 2)) -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign" \
		-out "$pki/$1.crt"
}

# cert NAME CA SUBJECT USAGES [SANS]: USAGES serverAuth, clientAuth or both (comma-separated).
cert() {
	local name=$1 ca=$2 subj=$3 usage=$4 sans=${5:-} ext
	key "$name"
	ext=$(mktemp)
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		[ -z "$sans" ] || echo "subjectAltName=$sans"
	} >"$ext"
	openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr"
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
		-days "$days" -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
	rm -f "$ext" "$pki/$name.csr"
	openssl verify -CAfile "$pki/$ca.crt" "$pki/$name.crt" >/dev/null ||
		{ echo "pki: $name.crt does not verify against $ca.crt" >&2; exit 1; }
}

ca ca sdp-cluster-ca
ca etcd-ca sdp-cluster-etcd-ca
ca front-proxy-ca sdp-cluster-front-proxy-ca

cert etcd-server etcd-ca "/CN=$node" serverAuth,clientAuth "DNS:localhost,DNS:$node,IP:127.0.0.1"
cert etcd-peer etcd-ca "/CN=$node" serverAuth,clientAuth "DNS:localhost,DNS:$node,IP:127.0.0.1"
cert apiserver-etcd-client etcd-ca "/CN=kube-apiserver-etcd-client" clientAuth
cert apiserver ca "/CN=kube-apiserver" serverAuth \
	"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$node,IP:$svc,IP:$ip,IP:127.0.0.1"
cert apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert front-proxy-client front-proxy-ca "/CN=front-proxy-client" clientAuth
cert kubelet ca "/O=system:nodes/CN=system:node:$node" serverAuth "DNS:$node,IP:$ip"
cert kubelet-client ca "/O=system:nodes/CN=system:node:$node" clientAuth
cert controller-manager ca "/CN=system:kube-controller-manager" clientAuth
cert scheduler ca "/CN=system:kube-scheduler" clientAuth
cert kube-proxy ca "/CN=system:kube-proxy" clientAuth
cert admin ca "/O=system:masters/CN=kubernetes-admin" clientAuth
rm -f "$pki"/*.srl

key sa
openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"

b64() { base64 -w0 <"$1"; }
kubeconfig() { # NAME USER CERT
	local f=$dir/$1.conf
	cat >"$f" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sdp-cluster
  cluster:
    server: $server
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(b64 "$pki/$3.crt")
    client-key-data: $(b64 "$pki/$3.key")
contexts:
- name: $2@sdp-cluster
  context:
    cluster: sdp-cluster
    user: $2
current-context: $2@sdp-cluster
EOF
	chmod 600 "$f"
}
kubeconfig admin kubernetes-admin admin
kubeconfig kubelet "system:node:$node" kubelet-client
kubeconfig controller-manager system:kube-controller-manager controller-manager
kubeconfig scheduler system:kube-scheduler scheduler
kubeconfig kube-proxy system:kube-proxy kube-proxy
