#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, at host level (`make cluster-up` /
# `make cluster-down`; docs/kubernetes.md "The local cluster").
#
#   cluster.sh up      start it (idempotent: a running cluster is left as it is)
#   cluster.sh down    stop everything it started, by pid, and remove what it created
#   cluster.sh status  print what runs
#   cluster.sh env     print the shell lines that point kubectl and helm at it:
#                      eval "$(scripts/k8s/cluster.sh env)"
#
# What runs (all host processes, pids in $STATE/pids, logs in $STATE/logs):
#   etcd (127.0.0.1), kube-apiserver + kubelet (on the bridge address), kube-controller-manager,
#   kube-scheduler, kube-proxy (iptables), a private containerd (own config, root, state and
#   socket) running pods with runc, the local-path provisioner (scripts/k8s/cluster/
#   provisioner.py). CoreDNS runs as a pod. Binaries come from .cache/k8s-bin (built from the
#   Go module proxy by install-all.sh / install-node.sh), images are built here and imported
#   into the private containerd: nothing is pulled from a registry.
#
# Runtime state: .cache/cluster (removed by `down`); image store: .cache/cluster-containerd
# (kept, so a warm `up` imports nothing). Addresses and ports: scripts/k8s/cluster.env.
source "$(dirname "$0")/lib.sh"
# shellcheck source=cluster.env
source "$K8S_SCRIPTS/cluster.env"

STATE=${MAGNETAR_CLUSTER_STATE:-$ROOT/.cache/cluster}
CTRD_ROOT=${MAGNETAR_CLUSTER_CONTAINERD_ROOT:-$ROOT/.cache/cluster-containerd}
PKI=$STATE/pki
KC=$STATE/kubeconfig          # admin kubeconfig, what users and tests use
SOCK=$STATE/run/containerd.sock
CNI_NET=magnetar
KUBELET_CGROUP_ROOT=/magnetar-cluster
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
    net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
    net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max
    net.netfilter.nf_conntrack_tcp_timeout_established
    net.netfilter.nf_conntrack_tcp_timeout_close_wait)
PROJECT_IMAGES=(broker bookie operator minio)  # minio: the chart's offload target (minio.enabled)

clog() { printf '[cluster %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { clog "ERROR: $*"; exit 1; }
bin() { cached_bin "$1" "$2"; }
K() { "$(bin kubectl "$KUBERNETES_VERSION")" --kubeconfig "$KC" "$@"; }

pid_alive() { [ -f "$STATE/pids/$1.pid" ] && kill -0 "$(cat "$STATE/pids/$1.pid")" 2>/dev/null; }

# start NAME CMD...: runs CMD in its own session, logs to $STATE/logs/NAME.log, pid recorded
start() {
    local name=$1
    shift
    if pid_alive "$name"; then return 0; fi
    setsid "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$STATE/pids/$name.pid"
}

# stop TIMEOUT NAME...: TERM to all of them at once, then KILL whatever still runs after
# TIMEOUT seconds (kube-apiserver may ignore the first TERM once etcd is gone)
stop() {
    local timeout=$1 name pid t0=$SECONDS left
    shift
    local pids=()
    for name in "$@"; do
        [ -f "$STATE/pids/$name.pid" ] || continue
        pid=$(cat "$STATE/pids/$name.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$name:$pid")
        fi
    done
    for _ in $(seq 1 $((timeout * 10))); do
        left=0
        for name in "${pids[@]}"; do kill -0 "${name#*:}" 2>/dev/null && left=1; done
        [ $left = 0 ] && break
        sleep 0.1
    done
    for name in "${pids[@]}"; do
        if kill -0 "${name#*:}" 2>/dev/null; then
            clog "${name%%:*} (pid ${name#*:}) ignored TERM for ${timeout}s: KILL"
            kill -KILL "${name#*:}" 2>/dev/null || true
        fi
    done
    for name in "$@"; do rm -f "$STATE/pids/$name.pid"; done
    [ $((SECONDS - t0)) -lt 3 ] || clog "$* stopped in $((SECONDS - t0))s"
}

wait_for() { # wait_for SECONDS DESCRIPTION CMD...
    local t=$1 what=$2 i
    shift 2
    for i in $(seq 1 $((t * 2))); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    die "$what not ready after ${t}s (logs: $STATE/logs)"
}

check_host() {
    [ "$(id -u)" = 0 ] || die "needs root (bridge, iptables, containerd)"
    local n v missing=()
    for n in kubelet kube-scheduler kube-proxy kubeadm kubectl kube-apiserver \
        kube-controller-manager; do
        [ -x "$(bin "$n" "$KUBERNETES_VERSION")" ] || missing+=("$n")
    done
    [ -x "$(bin coredns "$COREDNS_VERSION")" ] || missing+=(coredns)
    [ -x "$(bin etcd "$ETCD_VERSION")" ] || missing+=(etcd)
    if [ ${#missing[@]} -gt 0 ]; then
        clog "building ${missing[*]} (cached in $BIN_CACHE)"
        bash "$K8S_SCRIPTS/install-all.sh" >&2
        bash "$K8S_SCRIPTS/install-node.sh" >&2
    fi
    for n in containerd ctr runc iptables ip conntrack mkfs.ext4; do
        command -v "$n" >/dev/null || missing+=("$n")
    done
    [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
    if [ ${#missing[@]} -gt 0 ]; then
        clog "installing Debian's containerd runc iptables conntrack containernetworking-plugins e2fsprogs"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            containerd runc iptables iproute2 conntrack containernetworking-plugins e2fsprogs >&2
    fi
    [ ${#SOCK} -lt 100 ] || die "socket path too long for a unix socket: $SOCK (set MAGNETAR_CLUSTER_STATE)"
}

# --- host state: sysctls, bridge ------------------------------------------------------------
save_host_state() {
    [ -f "$STATE/host/sysctl.saved" ] && return 0
    mkdir -p "$STATE/host"
    local s v
    for s in "${SYSCTLS[@]}"; do
        v=$(sysctl -n "$s" 2>/dev/null) || continue
        printf '%s=%s\n' "$s" "$v"
    done >"$STATE/host/sysctl.tmp"
    mv "$STATE/host/sysctl.tmp" "$STATE/host/sysctl.saved"
    ls /run/netns 2>/dev/null | sort >"$STATE/host/netns.before" || true
}

restore_sysctls() {
    [ -f "$STATE/host/sysctl.saved" ] || return 0
    local line key val now
    while IFS= read -r line; do
        key=${line%%=*}
        val=${line#*=}
        now=$(sysctl -n "$key" 2>/dev/null) || continue
        if [ "$now" != "$val" ]; then
            sysctl -q -w "$key=$val" >/dev/null 2>&1 && clog "restored $key=$val (was $now)" \
                || clog "could not restore $key=$val (is $now)"
        fi
    done <"$STATE/host/sysctl.saved"
}

bridge_up() {
    if ! ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1; then
        ip link add "$CLUSTER_BRIDGE" type bridge
        touch "$STATE/host/bridge.created"
    fi
    local prefix=${CLUSTER_POD_SUBNET#*/}
    ip addr show dev "$CLUSTER_BRIDGE" | grep -q "inet $CLUSTER_GATEWAY/" \
        || ip addr add "$CLUSTER_GATEWAY/$prefix" dev "$CLUSTER_BRIDGE"
    ip link set "$CLUSTER_BRIDGE" up
}

# --- the claims' filesystem -----------------------------------------------------------------
volumes_fs() {
    local dir="$STATE/volumes" img="$STATE/volumes.ext4"
    if [ "$CLUSTER_VOLUMES_SIZE" = 0 ]; then
        clog "volumes: directories on the host's filesystem (CLUSTER_VOLUMES_SIZE=0)"
        return 0
    fi
    mountpoint -q "$dir" && return 0
    if [ ! -f "$img" ]; then
        truncate -s "$CLUSTER_VOLUMES_SIZE" "$img"
        # -m 0: no blocks reserved for root, so f_bavail is all the free space
        mkfs.ext4 -q -F -m 0 -L mgn-volumes "$img" >&2 || { rm -f "$img"; die "mkfs.ext4 $img failed"; }
    fi
    mount -o loop "$img" "$dir" \
        || die "cannot loop-mount $img on $dir (no loop devices here?); CLUSTER_VOLUMES_SIZE=0 keeps the volumes on the host's filesystem"
    clog "volumes: $CLUSTER_VOLUMES_SIZE ext4 image loop-mounted on $dir"
}

# --- configuration files ---------------------------------------------------------------------
write_configs() {
    mkdir -p "$STATE"/{logs,pids,run,cni/net.d,cni/ipam,etcd,kubelet,kubelet-plugins,pod-logs,containerd-state,volumes,host} "$PKI" "$CTRD_ROOT"
    chmod 700 "$STATE/etcd"
    cat >"$STATE/containerd.toml" <<EOF
version = 2
root = "$CTRD_ROOT"
state = "$STATE/containerd-state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
    cat >"$STATE/cni/net.d/10-magnetar.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {"type": "bridge", "bridge": "$CLUSTER_BRIDGE", "isGateway": true, "ipMasq": true,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam",
              "ranges": [[{"subnet": "$CLUSTER_POD_SUBNET", "gateway": "$CLUSTER_GATEWAY"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "firewall"},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
    # no upstream resolver: pods resolve only cluster names (CoreDNS has no forward)
    printf 'nameserver %s\n' "$CLUSTER_DNS_IP" >"$STATE/resolv.conf"
    cat >"$STATE/kubeadm.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $CLUSTER_GATEWAY
  bindPort: $CLUSTER_APISERVER_PORT
nodeRegistration:
  name: $CLUSTER_NODE_NAME
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $KUBERNETES_VERSION
clusterName: magnetar-local
certificatesDir: $PKI
networking:
  serviceSubnet: $CLUSTER_SERVICE_CIDR
  podSubnet: $CLUSTER_POD_CIDR
  dnsDomain: cluster.local
apiServer:
  certSANs: [127.0.0.1, localhost, $CLUSTER_GATEWAY]
EOF
    cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $KUBELET_CGROUP_ROOT
address: $CLUSTER_GATEWAY
readOnlyPort: 0
healthzPort: 0
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [$CLUSTER_DNS_IP]
resolvConf: $STATE/resolv.conf
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/kubelet-plugins
failSwapOn: false
protectKernelDefaults: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
EOF
    cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $CLUSTER_NODE_NAME
clientConnection: {kubeconfig: $STATE/kube-proxy.conf}
clusterCIDR: $CLUSTER_POD_CIDR
nodePortAddresses: [$CLUSTER_GATEWAY/32]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

certs() {
    [ -f "$KC" ] && return 0
    local kubeadm
    kubeadm=$(bin kubeadm "$KUBERNETES_VERSION")
    "$kubeadm" init phase certs all --config "$STATE/kubeadm.yaml" >"$STATE/logs/kubeadm.log" 2>&1
    "$kubeadm" init phase kubeconfig all --config "$STATE/kubeadm.yaml" \
        --kubeconfig-dir "$STATE" >>"$STATE/logs/kubeadm.log" 2>&1
    "$kubeadm" kubeconfig user --config "$STATE/kubeadm.yaml" --client-name system:kube-proxy \
        >"$STATE/kube-proxy.conf" 2>>"$STATE/logs/kubeadm.log"
    cp "$STATE/admin.conf" "$KC.tmp"
    mv "$KC.tmp" "$KC"
}

# --- images ----------------------------------------------------------------------------------
# import TAG: docker save | ctr import, skipped when the private containerd already holds the
# same docker image id (stamp in the containerd root, which outlives `down`).
import_image() {
    local tag=$1 id stamp
    id=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null) || { clog "image $tag missing in docker: not imported"; return 1; }
    stamp="$CTRD_ROOT/magnetar-imported/$(echo "$tag" | tr '/:' '__')"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$id" ] \
        && ctr -a "$SOCK" -n k8s.io images ls -q | grep -qx "docker.io/$tag"; then
        return 0
    fi
    clog "importing $tag into the cluster's containerd"
    docker save "$tag" | ctr -a "$SOCK" -n k8s.io images import --no-unpack - >/dev/null
    mkdir -p "$(dirname "$stamp")"
    echo "$id" >"$stamp"
}

images() {
    local tags version t
    mapfile -t tags < <(bash "$K8S_SCRIPTS/cluster-images.sh")
    PAUSE_IMAGE="docker.io/${tags[0]}"
    COREDNS_IMAGE="docker.io/${tags[1]}"
    export PAUSE_IMAGE COREDNS_IMAGE
    version=$(sed -nE 's/^__version__ = "(.*)"/\1/p' "$ROOT/src/magnetar/__init__.py")
    for t in "${tags[@]}"; do PROJECT_TAGS+=("$t"); done
    for t in "${PROJECT_IMAGES[@]}"; do
        t="${MAGNETAR_IMAGE_PREFIX:-magnetar}/$t:${MAGNETAR_IMAGE_TAG:-$version}"
        if docker image inspect "$t" >/dev/null 2>&1; then
            PROJECT_TAGS+=("$t")
        else
            clog "$t not built (make images): not loaded"
        fi
    done
}

# --- components ------------------------------------------------------------------------------
start_control_plane() {
    start etcd "$(bin etcd "$ETCD_VERSION")" --name magnetar-local --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT" \
        --advertise-client-urls "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT" \
        --listen-peer-urls "http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
        --initial-cluster "magnetar-local=http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
        --listen-metrics-urls "" --quota-backend-bytes 2147483648
    start kube-apiserver "$(bin kube-apiserver "$KUBERNETES_VERSION")" \
        --advertise-address "$CLUSTER_GATEWAY" --bind-address "$CLUSTER_GATEWAY" \
        --secure-port "$CLUSTER_APISERVER_PORT" \
        --etcd-servers "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT" \
        --service-cluster-ip-range "$CLUSTER_SERVICE_CIDR" \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --allow-privileged=true --client-ca-file "$PKI/ca.crt" \
        --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types InternalIP \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$PKI/sa.pub" \
        --service-account-signing-key-file "$PKI/sa.key" \
        --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
        --proxy-client-key-file "$PKI/front-proxy-client.key" \
        --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
        --requestheader-allowed-names front-proxy-client \
        --requestheader-extra-headers-prefix X-Remote-Extra- \
        --requestheader-group-headers X-Remote-Group \
        --requestheader-username-headers X-Remote-User
    wait_for 60 kube-apiserver "$(bin kubectl "$KUBERNETES_VERSION")" \
        --kubeconfig "$STATE/super-admin.conf" get --raw /readyz
    # admin.conf's group (kubeadm:cluster-admins) is bound by `kubeadm init`, which is not run
    local sk=("$(bin kubectl "$KUBERNETES_VERSION")" --kubeconfig "$STATE/super-admin.conf")
    "${sk[@]}" get clusterrolebinding kubeadm:cluster-admins >/dev/null 2>&1 \
        || "${sk[@]}" create clusterrolebinding kubeadm:cluster-admins \
            --clusterrole cluster-admin --group kubeadm:cluster-admins >/dev/null
    K get clusterrolebinding magnetar:kube-proxy >/dev/null 2>&1 \
        || K create clusterrolebinding magnetar:kube-proxy --clusterrole system:node-proxier \
            --user system:kube-proxy >/dev/null
    start kube-controller-manager "$(bin kube-controller-manager "$KUBERNETES_VERSION")" \
        --kubeconfig "$STATE/controller-manager.conf" \
        --authentication-kubeconfig "$STATE/controller-manager.conf" \
        --authorization-kubeconfig "$STATE/controller-manager.conf" \
        --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
        --allocate-node-cidrs --cluster-cidr "$CLUSTER_POD_CIDR" --node-cidr-mask-size 24 \
        --service-cluster-ip-range "$CLUSTER_SERVICE_CIDR" \
        --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
        --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
        --use-service-account-credentials=true --controllers '*,bootstrapsigner,tokencleaner'
    start kube-scheduler "$(bin kube-scheduler "$KUBERNETES_VERSION")" \
        --kubeconfig "$STATE/scheduler.conf" \
        --authentication-kubeconfig "$STATE/scheduler.conf" \
        --authorization-kubeconfig "$STATE/scheduler.conf" \
        --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false
}

start_node() {
    start containerd containerd --config "$STATE/containerd.toml"
    wait_for 30 containerd ctr -a "$SOCK" version
    local t
    for t in "${PROJECT_TAGS[@]}"; do import_image "$t" || true; done
    # kubelet's cgroupRoot must exist in every hierarchy (cgroup v1, cgroupfs driver)
    local h
    for h in /sys/fs/cgroup/*/; do
        [ -L "${h%/}" ] || mkdir -p "$h${KUBELET_CGROUP_ROOT#/}" 2>/dev/null || true
    done
    start kubelet "$(bin kubelet "$KUBERNETES_VERSION")" --config "$STATE/kubelet.yaml" \
        --kubeconfig "$STATE/kubelet.conf" --root-dir "$STATE/kubelet" \
        --node-ip "$CLUSTER_GATEWAY" --hostname-override "$CLUSTER_NODE_NAME"
    start kube-proxy "$(bin kube-proxy "$KUBERNETES_VERSION")" --config "$STATE/kube-proxy.yaml"
    start provisioner "$ROOT/.venv/bin/python" "$K8S_SCRIPTS/cluster/provisioner.py" \
        --kubectl "$(bin kubectl "$KUBERNETES_VERSION")" --kubeconfig "$KC" \
        --root "$STATE/volumes" --node "$CLUSTER_NODE_NAME"
    wait_for 90 "node $CLUSTER_NODE_NAME" K wait --for=condition=Ready \
        "node/$CLUSTER_NODE_NAME" --timeout=1s
}

addons() {
    sed -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|" -e "s|@DNS_IP@|$CLUSTER_DNS_IP|" \
        "$K8S_SCRIPTS/cluster/addons.yaml" | K apply -f - >/dev/null
    wait_for 90 CoreDNS K -n kube-system wait --for=condition=Available deploy/coredns --timeout=1s
}

up() {
    local t0=$SECONDS
    check_host
    mkdir -p "$STATE"/{logs,pids,host}
    if pid_alive kube-apiserver && pid_alive kubelet && K get --raw /readyz >/dev/null 2>&1; then
        clog "already running (kubeconfig: $KC)"
        return 0
    fi
    save_host_state
    PROJECT_TAGS=()
    images
    write_configs
    volumes_fs
    certs
    bridge_up
    start_control_plane
    start_node
    addons
    clog "up in $((SECONDS - t0))s: export KUBECONFIG=$KC"
}

# --- teardown --------------------------------------------------------------------------------
delete_workloads() {
    pid_alive kube-apiserver || return 0
    K get --raw /readyz >/dev/null 2>&1 || return 0
    clog "deleting workloads and pods"
    K delete deploy,sts,ds,rs,job,cronjob --all -A --wait=false >/dev/null 2>&1 || true
    K delete pods --all -A --grace-period 5 --timeout 60s >/dev/null 2>&1 || true
    K delete pvc --all -A --timeout 30s >/dev/null 2>&1 || true
    # CNI allocations go when kubelet has torn the sandboxes down
    clog "pods deleted"
    local i
    for i in $(seq 1 60); do
        if [ -z "$(ls "$STATE/cni/ipam/$CNI_NET" 2>/dev/null | grep -vE '^(lock|last_reserved_ip\.0)$')" ]; then
            clog "CNI allocations released"
            return 0
        fi
        sleep 0.5
    done
    clog "CNI allocations still present after 30s: $(ls "$STATE/cni/ipam/$CNI_NET" | tr '\n' ' ')"
}

cleanup_runtime_leftovers() {
    # sandboxes containerd still holds (a kubelet that died early): stop and remove them so the
    # CNI DEL runs and their netns go
    if [ -S "$SOCK" ] && pid_alive containerd; then
        local c
        for c in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr -a "$SOCK" -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1 || true
        done
        sleep 1
        for c in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr -a "$SOCK" -n k8s.io tasks delete "$c" >/dev/null 2>&1 || true
        done
        for c in $(ctr -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
            ctr -a "$SOCK" -n k8s.io containers delete "$c" >/dev/null 2>&1 || true
        done
    fi
    # shims of this containerd (found by the socket they were started with), by pid
    local p
    for p in $(pgrep -f "containerd-shim.*-address $SOCK" 2>/dev/null); do
        kill -KILL "$p" 2>/dev/null || true
    done
}

cleanup_network() {
    local t c
    # kube-proxy's own rules, then whatever KUBE-*/CNI-* chains remain (kubelet's canaries, the
    # CNI plugins' masquerade/firewall/portmap chains): first the jumps from built-in chains
    "$(bin kube-proxy "$KUBERNETES_VERSION")" --cleanup >"$STATE/logs/kube-proxy-cleanup.log" 2>&1 || true
    for t in filter nat mangle; do
        iptables-save -t "$t" 2>/dev/null | grep -E '^-A [A-Z]+ .*-j (KUBE|CNI)-' \
            | grep -vE '^-A (KUBE|CNI)-' | sed 's/^-A /-D /' | while read -r rule; do
            eval "iptables -t $t $rule" 2>/dev/null || true
        done
        for c in $(iptables-save -t "$t" 2>/dev/null | sed -nE 's/^:((KUBE|CNI)-[^ ]+) .*/\1/p'); do
            iptables -t "$t" -F "$c" 2>/dev/null || true
        done
        for c in $(iptables-save -t "$t" 2>/dev/null | sed -nE 's/^:((KUBE|CNI)-[^ ]+) .*/\1/p'); do
            iptables -t "$t" -X "$c" 2>/dev/null || true
        done
    done
    # network namespaces containerd made for pods
    local ns
    for ns in $(ls /run/netns 2>/dev/null); do
        grep -qx "$ns" "$STATE/host/netns.before" 2>/dev/null && continue
        case $ns in cni-*) ip netns delete "$ns" 2>/dev/null || { umount "/run/netns/$ns" 2>/dev/null; rm -f "/run/netns/$ns"; } ;; esac
    done
    if ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1; then
        ip link delete "$CLUSTER_BRIDGE" || true
    fi
    # veths whose bridge went are removed with their netns; conntrack entries of pod addresses
    conntrack -D -s "$CLUSTER_POD_SUBNET" >/dev/null 2>&1 || true
    conntrack -D -d "$CLUSTER_POD_SUBNET" >/dev/null 2>&1 || true
}

cleanup_mounts_and_cgroups() {
    local m
    # the claims' filesystem last: pods' bind mounts of its directories go first
    for m in $(findmnt -rn -o TARGET | grep -F "$STATE/" | grep -vxF "$STATE/volumes" | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    if mountpoint -q "$STATE/volumes"; then
        umount "$STATE/volumes" 2>/dev/null || umount -l "$STATE/volumes" 2>/dev/null || true
    fi
    for m in $(losetup -j "$STATE/volumes.ext4" -O NAME -n 2>/dev/null); do
        losetup -d "$m" 2>/dev/null || true
    done
    for m in $(findmnt -rn -o TARGET | grep -F "$CTRD_ROOT/" | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    local h
    for h in /sys/fs/cgroup/*/; do
        [ -d "$h${KUBELET_CGROUP_ROOT#/}" ] || continue
        find "$h${KUBELET_CGROUP_ROOT#/}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    # kubelet's symlinks to our pod logs (its /var/log/containers path is fixed)
    find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" -delete 2>/dev/null || true
}

down() {
    set +e # best effort from here: every step runs even when an earlier one found nothing
    mkdir -p "$STATE"
    [ -d "$STATE/pids" ] || [ -f "$STATE/host/sysctl.saved" ] || { clog "not running"; return 0; }
    local t0=$SECONDS
    delete_workloads
    stop 15 provisioner kube-proxy kubelet
    cleanup_runtime_leftovers
    stop 15 kube-scheduler kube-controller-manager containerd
    stop 10 kube-apiserver
    stop 15 etcd
    # anything else recorded (a component added later)
    local f
    for f in "$STATE"/pids/*.pid; do [ -e "$f" ] && stop 10 "$(basename "$f" .pid)"; done
    cleanup_network
    cleanup_mounts_and_cgroups
    restore_sysctls
    rm -rf "$STATE"
    clog "down in $((SECONDS - t0))s"
}

status() {
    local f
    for f in "$STATE"/pids/*.pid; do
        [ -e "$f" ] || { echo "not running"; return 0; }
        if kill -0 "$(cat "$f")" 2>/dev/null; then s=running; else s=dead; fi
        printf '%-24s pid %-8s %s\n' "$(basename "$f" .pid)" "$(cat "$f")" "$s"
    done
    K get nodes,pods -A -o wide 2>/dev/null || true
}

# env: `export` lines for a shell: KUBECONFIG, and kubectl and helm (built in .cache/k8s-bin)
# first on PATH. Prints nothing else, so `eval "$(scripts/k8s/cluster.sh env)"` works.
env_lines() {
    printf 'export KUBECONFIG=%q\n' "$KC"
    printf 'export PATH=%q:%q:"$PATH"\n' "$(dirname "$(bin kubectl "$KUBERNETES_VERSION")")" \
        "$(dirname "$(cached_bin helm "$HELM_VERSION")")"
}

# load TAG...: import images from Docker into the running cluster's containerd (as
# `kind load docker-image`), e.g. a retagged build for a rollout.
load() {
    [ -S "$SOCK" ] || { clog "no cluster runs (make cluster-up)"; exit 1; }
    local tag
    for tag in "$@"; do import_image "$tag" || exit 1; done
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
env) env_lines ;;
load) shift; load "$@" ;;
*) echo "usage: $0 up|down|status|env|load TAG..." >&2; exit 2 ;;
esac
