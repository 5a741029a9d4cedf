# Sourced by the start scripts (postgres-start.sh, mysql-start.sh): what the
# operator's topology ConfigMap says, and the steps both engines take on it
# to keep data safe. Before sourcing, a script sets log_name, data (its data
# directory) and default_port; it defines has_data, init_primary, clone and
# rejoin (what a non-primary that has data does first), then calls
# prepare_data.
#
# Topology keys: "primary" (the primary's pod name), "initialized" (set once
# the Database has served), "rebuild-<pod>" (a rebuild request's token),
# "adopt" (the instances start on volumes kept from an earlier Database of
# this name, and no primary is chosen yet: each one with data starts
# read-only and replicating from nobody, and defines adopt_data for that;
# the operator then chooses the primary from their data).

topology="${TOPOLOGY_DIR:-/etc/database-operator/topology}"
volume="$(dirname "$data")"

log() { echo "$log_name: $*" >&2; }

# topology_key prints a key's value, or nothing when it is not set.
topology_key() { cat "$topology/$1" 2>/dev/null || true; }

# The instance agent passes the primary Lease's holder, fresher than the
# mounted ConfigMap (which the kubelet refreshes late).
primary="${AGENT_PRIMARY:-$(topology_key primary)}"
adopting=""
if [ -z "$primary" ] && [ -n "$(topology_key adopt)" ]; then
	adopting=1 # kept volumes: no primary until the operator chose one
else
	# Before the operator writes its topology, instance 0 is the first primary.
	[ -n "$primary" ] || primary="${POD_NAME%-*}-0"
fi
host="${PRIMARY_HOST:-$primary.${PEER_DOMAIN:-}}"
port="${PRIMARY_PORT:-$default_port}"

# no_data_message is what an instance without data on a kept volume says
# (its termination message); the operator (database_adopt.go) knows it.
no_data_message="no data on this volume"

# set_aside keeps a data directory that may hold writes nobody else has.
set_aside() {
	aside="$data.$1-$(date -u +%Y%m%dT%H%M%SZ)"
	mv "$data" "$aside"
	log "moved the data directory aside to $aside"
}

prepare_data() {
	if [ -n "$adopting" ]; then
		if ! has_data; then
			log "no data, and no primary chosen yet among the kept volumes: waiting for the operator to choose one"
			# The operator reads it from the container's status: an
			# instance without data is no candidate.
			[ ! -w /dev/termination-log ] || printf '%s' "$no_data_message" >/dev/termination-log
			exit 1
		fi
		adopt_data
		return
	fi
	if [ "$POD_NAME" = "$primary" ]; then
		has_data && return
		# Once the Database has served, a primary without data is a lost or
		# replaced volume: never answer it with a new, empty database.
		if [ -n "$(topology_key initialized)" ]; then
			log "the primary has no data but the Database was initialized: refusing to start an empty one (restore the volume, or let the operator promote a replica)"
			exit 1
		fi
		init_primary
		return
	fi
	# A rebuild request is carried out once: its token is recorded on the
	# volume afterwards.
	token="$(topology_key "rebuild-$POD_NAME")"
	if [ -n "$token" ] && [ "$token" != "$(cat "$volume/rebuilt" 2>/dev/null || true)" ]; then
		log "rebuild $token asked for by the operator"
		! has_data || set_aside rebuild
		clone
		printf '%s\n' "$token" >"$volume/rebuilt"
	elif ! has_data; then
		clone
	else
		rejoin
	fi
}
