#!/bin/sh
# A deckhand Redis data node (primary or replica): deploy/compose.yml's entrypoint, also run
# as a process by tests/integration/test_compose_redis.py (so what is tested is what ships).
#
# The role is never fixed on the command line. At every start the node asks the sentinels
# who the primary is now and follows the majority: after a failover the old primary comes
# back as a replica of the promoted one, not as a second primary with old data. Only when
# no sentinel answers within SENTINEL_WAIT seconds does it keep the role in its own config
# file (on the volume; Sentinel rewrites it with CONFIG REWRITE at every reconfiguration),
# and on the very first boot the role FIRST_PRIMARY gives it.
#
# A node is not promotable (replica-priority 0) until it has synced with a primary since it
# started, or is the primary. Sentinel takes a replica that never connected since its start
# (master_link_down_since_seconds:-1) for a fresh one: after a failover, a member that comes
# back while the current primary is still down would be promoted with the data it had
# before the failover, and every write since would be lost when the real primary returns
# and resyncs from it. To accept that loss on purpose (the real primary is gone for good):
# `redis-cli CONFIG SET replica-priority 100` on the stale member.
#
# Environment: ANNOUNCE_HOST (this node's name as the others reach it), FIRST_PRIMARY
# (host:port), SENTINELS ("host:port host:port …"), SERVICE (deckhand), REDIS_PORT (6379),
# REDIS_BIND ("* -::*"), DATA_DIR (/data), SENTINEL_WAIT (10), REPLICA_PRIORITY (100),
# REDIS_PASSWORD_FILE (the password every node and client uses; unset: none).
set -eu
: "${REDIS_PORT:=6379}" "${SERVICE:=deckhand}" "${DATA_DIR:=/data}" "${SENTINEL_WAIT:=10}"
: "${REDIS_BIND:=* -::*}" "${REPLICA_PRIORITY:=100}"
me="$ANNOUNCE_HOST:$REDIS_PORT"
conf="$DATA_DIR/redis.conf"
password=""
[ -z "${REDIS_PASSWORD_FILE:-}" ] || password=$(cat "$REDIS_PASSWORD_FILE")

if [ ! -s "$conf" ]; then  # first boot: the role the compose file gives
  {
    echo "port $REDIS_PORT"
    echo "bind $REDIS_BIND"
    echo "dir $DATA_DIR"
    echo "appendonly yes"
    echo "appendfsync everysec"
    echo "maxmemory-policy noeviction"
    echo "replica-announce-ip $ANNOUNCE_HOST"
    echo "replica-announce-port $REDIS_PORT"
    [ "$FIRST_PRIMARY" = "$me" ] || echo "replicaof ${FIRST_PRIMARY%:*} ${FIRST_PRIMARY##*:}"
  } > "$conf"
fi

ask_sentinels() {  # prints "count host:port" for the most common answer, or nothing
  for sentinel in $SENTINELS; do
    timeout 2 redis-cli -h "${sentinel%:*}" -p "${sentinel##*:}" --raw \
      SENTINEL get-master-addr-by-name "$SERVICE" 2>/dev/null | paste -sd: - || true
  done | grep -E '^[^:]+:[0-9]+$' | sort | uniq -c | sort -rn | head -n 1
}

count=$(echo $SENTINELS | wc -w)
majority=$((count / 2 + 1))
deadline=$(($(date +%s) + SENTINEL_WAIT))
answer=""
while :; do
  answer=$(ask_sentinels)
  votes=$(echo "${answer:-0}" | awk '{print $1}')
  [ "$votes" -lt "$majority" ] || break
  [ "$(date +%s)" -lt "$deadline" ] || break
  sleep 0.5
done
primary=$(echo "$answer" | awk '{print $2}')

if [ -z "$primary" ]; then
  echo "redis.sh: no sentinel answered in ${SENTINEL_WAIT}s; keeping the role in $conf" >&2
  set --
elif [ "$primary" = "$me" ]; then
  echo "redis.sh: the sentinels say this node ($me) is the primary" >&2
  set -- --replicaof no one
else
  echo "redis.sh: the sentinels say the primary is $primary; replicating it" >&2
  set -- --replicaof "${primary%:*}" "${primary##*:}"
fi
if [ -n "$password" ]; then  # on the command line, not only in the file: it may rotate
  set -- "$@" --requirepass "$password" --masterauth "$password"
fi

promotable_once_synced() {  # runs beside redis-server (this shell's pid once exec'd)
  server=$$
  [ -z "$password" ] || export REDISCLI_AUTH="$password"
  while kill -0 "$server" 2>/dev/null; do
    case "$(redis-cli -p "$REDIS_PORT" info replication 2>/dev/null)" in
      *role:master*|*master_link_status:up*)
        redis-cli -p "$REDIS_PORT" config set replica-priority "$REPLICA_PRIORITY" >/dev/null \
          && echo "redis.sh: in sync or primary; promotable again" >&2 && return ;;
    esac
    sleep 0.5
  done
}
if [ "$primary" = "$me" ]; then
  set -- "$@" --replica-priority "$REPLICA_PRIORITY"
else
  set -- "$@" --replica-priority 0
  promotable_once_synced &
fi
exec redis-server "$conf" "$@"
