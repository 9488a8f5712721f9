#!/bin/sh
# mDNS discovery between two separate network hosts: two Linux network namespaces joined
# by a veth pair (real multicast between them), one `dpadmm node --profile lan` in each,
# no addresses given to either. Needs root. Usage (from the repository root):
#
#   sudo sh node/testdata/mdns_netns.sh
#
# It prints the two models and exits 0 when both nodes finished with the same model.
# With LATE_LINK=1 the nodes start while the veth link is still down and the link comes up
# 3 s later: the nodes' mDNS services started without a usable interface and must restart.
set -eu
BIN=$(mktemp -d)/dpadmm
go build -o "$BIN" ./cmd/dpadmm
WORK=$(mktemp -d)
A=dpadmm-mdns-a B=dpadmm-mdns-b
cleanup() { ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add $A
ip netns add $B
ip link add veth-a netns $A type veth peer name veth-b netns $B
ip -n $A addr add 10.77.0.1/24 dev veth-a
ip -n $B addr add 10.77.0.2/24 dev veth-b
for ns in $A $B; do
	ip -n $ns link set lo up
done
links_up() {
	ip -n $A link set veth-a up multicast on
	ip -n $B link set veth-b up multicast on
}
if [ "${LATE_LINK:-0}" != 1 ]; then
	links_up
fi
ip netns exec $A "$BIN" node --run mdns --data embedded --shard 0/2 --datadir "$WORK/a" --profile lan \
	--listen /ip4/10.77.0.1/tcp/0 --start --min-peers 2 --hops 200 --join-window 1s >"$WORK/a.out" 2>"$WORK/a.err" &
PA=$!
ip netns exec $B "$BIN" node --run mdns --data embedded --shard 1/2 --datadir "$WORK/b" --profile lan \
	--listen /ip4/10.77.0.2/tcp/0 --hops 200 >"$WORK/b.out" 2>"$WORK/b.err" &
PB=$!
if [ "${LATE_LINK:-0}" = 1 ]; then
	sleep 3
	links_up
fi
rc=0
wait $PA || rc=1
wait $PB || rc=1
cat "$WORK/a.out" "$WORK/b.out"
cat "$WORK/a.err" "$WORK/b.err" >&2
ma=$(tr -d ' \n' <"$WORK/a/model.json" | sed 's/.*"model":\(\[[^]]*\]\).*/\1/')
mb=$(tr -d ' \n' <"$WORK/b/model.json" | sed 's/.*"model":\(\[[^]]*\]\).*/\1/')
if [ $rc -ne 0 ] || [ "$ma" != "$mb" ]; then
	echo "mdns netns test: FAIL" >&2
	exit 1
fi
echo "mdns netns test: PASS (both nodes hold $ma)"
