"""Helpers of scripts/bench-scale.sh (apns-dispatcher's token partitions and content-service's memory at scale).

Run with the venv's python (it needs confluent-kafka; bench-scale.sh makes the venv):

  bench_scale.py topics BOOTSTRAP PARTITIONS
      creates Islet's activity topics (tokens compacted; push-requests, push-outcomes,
      activity-events, dlq) with PARTITIONS partitions each (co-partitioned: equal counts)
  bench_scale.py check-partitioner BOOTSTRAP PARTITIONS
      checks this file's murmur2 against the Java client's test vectors, then against librdkafka's
      murmur2_random partitioner: 2,000 records keyed by bare activity ids produced to a scratch
      topic, the partition each landed in compared with the one computed here
  bench_scale.py load BOOTSTRAP COUNT PARTITIONS [BUDGETS]
      writes COUNT update-token records (TokenRecord JSON, schema 1) straight onto islet.tokens.v1,
      each to the partition Islet's partitioner gives its key (murmur2 of the activity id, the part
      of `<bundleId>/<activityId>` after the `/`); with BUDGETS=1, also a budget for each activity
      (DispatchBudgetRecord JSON: half of its priority-10 budget spent a minute ago, so that every
      activity still holds one when the dispatcher reads it) onto islet.dispatch-budgets.v1 in the
      same partition; prints one line of JSON: records, bytes, seconds, per-partition counts
  bench_scale.py load-memory BOOTSTRAP COUNT PARTITIONS
      writes a content-service memory (ContentMemoryRecord JSON) for each of the COUNT activities
      `load` writes tokens for, straight onto islet.content-memory.v1 in the activity's partition,
      then a checkpoint per partition; prints one line of JSON: records, bytes, seconds
  bench_scale.py metrics URL
      prints `tokens restore_sum restore_count` from apns-dispatcher's /metrics
      (islet_tokens_table_size; islet_tokens_restore_seconds' sum and count; -1 when absent)
  bench_scale.py summary RESULTS_JSON
      prints the table and the RESULT line from the figures bench-scale.sh collected

The records: three apps (a food delivery app with `order-N` ids, half of the records; a ride app
with UUID ids, 30 %; a sports app with `match-N` ids, 20 %), 80-byte random tokens (160 lowercase
hex characters), four app versions per app, 2 % sandbox, frequent updates on for most, a device id
(UUID), a user id, activityStartedAt a few seconds before registeredAt, registeredAt within the
last 8 hours, ownerVerified on 80 %. Compact JSON with sorted keys, as IsletJSON writes it.
"""

import json
import random
import sys
import time
import urllib.request
import uuid

SEED = 0x9747B28C
M = 0x5BD1E995
MASK = 0xFFFFFFFF

# Kafka's UtilsTest (the Java client): murmur2(bytes) as a signed 32-bit int.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

TOPICS = [  # name, cleanup.policy, retention.ms (Shared/IsletMessages/IsletTopics.swift)
    ("islet.tokens.v1", "compact", None),
    ("islet.activity-events.v1", "delete", 7 * 86_400_000),
    ("islet.push-requests.v1", "delete", 3 * 86_400_000),
    ("islet.push-outcomes.v1", "delete", 7 * 86_400_000),
    ("islet.dlq.v1", "delete", 28 * 86_400_000),
    ("islet.content-memory.v1", "compact", None),
    ("islet.dispatch-budgets.v1", "compact", None),
]


def murmur2(data: bytes) -> int:
    """The Java client's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), unsigned 32-bit."""
    length = len(data)
    h = (SEED ^ length) & MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * M) & MASK
        k ^= k >> 24
        k = (k * M) & MASK
        h = (h * M) & MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * M) & MASK
    h ^= h >> 13
    h = (h * M) & MASK
    h ^= h >> 15
    return h


def partition_of(activity_id: str, partitions: int) -> int:
    """Kafka's default partitioner: toPositive(murmur2(key)) % numPartitions."""
    return (murmur2(activity_id.encode()) & 0x7FFFFFFF) % partitions


def signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def check_vectors():
    for data, want in JAVA_VECTORS.items():
        got = signed(murmur2(data))
        if got != want:
            sys.exit(f"murmur2({data!r}) = {got}, the Java client says {want}")


def topics(bootstrap, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = []
    for name, policy, retention in TOPICS:
        config = {"cleanup.policy": policy}
        if retention:
            config["retention.ms"] = str(retention)
        new.append(NewTopic(name, num_partitions=partitions, replication_factor=1, config=config))
    for name, future in admin.create_topics(new, request_timeout=30).items():
        future.result()
    meta = admin.list_topics(timeout=10)
    counts = {name: len(meta.topics[name].partitions) for name, _, _ in TOPICS}
    if set(counts.values()) != {partitions}:
        sys.exit(f"partition counts differ from {partitions}: {counts}")
    print(f"topics: {', '.join(counts)} ({partitions} partitions each)")


def check_partitioner(bootstrap, partitions):
    """librdkafka's murmur2_random over a bare activity id must agree with partition_of."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    check_vectors()
    topic = "bench-scale.partitioner-check"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20})
    rng = random.Random(7)
    ids = [f"order-{i}" for i in range(1000)] + [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(1000)]
    wrong = []

    def delivered(err, msg):
        if err is not None:
            sys.exit(f"partitioner check: delivery failed: {err}")
        key = msg.key().decode()
        if msg.partition() != partition_of(key, partitions):
            wrong.append((key, msg.partition(), partition_of(key, partitions)))

    for activity in ids:
        producer.produce(topic, key=activity, value=b"x", on_delivery=delivered)
    if producer.flush(30) != 0:
        sys.exit("partitioner check: records not delivered within 30 s")
    if wrong:
        sys.exit(f"partitioner check: {len(wrong)} of {len(ids)} keys land elsewhere than computed, e.g. {wrong[:3]}")
    print(f"partitioner: murmur2 matches the Java client's vectors and librdkafka's murmur2_random on {len(ids)} keys")


APPS = [  # bundle id, attributes type, versions, share of records (out of 10)
    ("com.example.fooddelivery", "DeliveryAttributes", ["5.12.0", "5.11.2", "5.10.1", "5.9.0"], 5),
    ("com.example.rides", "RideAttributes", ["3.4.1", "3.4.0", "3.3.7", "3.2.0"], 3),
    ("com.example.sports", "MatchAttributes", ["12.1.0", "12.0.3", "11.9.0", "11.8.2"], 2),
]


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def records(count, seed=1):
    """(activity id, key, value bytes) for COUNT update tokens."""
    rng = random.Random(seed)
    slots = [app for app in APPS for _ in range(app[3])]
    now_ms = int(time.time() * 1000)
    for i in range(count):
        bundle, attributes, versions, _ = slots[i % 10]
        if bundle == "com.example.rides":
            activity = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        elif bundle == "com.example.sports":
            activity = f"match-{i}"
        else:
            activity = f"order-{i}"
        registered = now_ms - rng.randrange(8 * 3_600_000)
        started = registered - rng.randrange(500, 15_000)
        device = str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper()
        environment = "sandbox" if rng.random() < 0.02 else "production"
        frequent = "true" if rng.random() < 0.7 else "false"
        version = versions[min(int(rng.expovariate(1.2)), 3)]
        owner = ',"ownerVerified":true' if rng.random() < 0.8 else ""
        registered_text = iso(registered)
        # Sorted keys, compact, as IsletJSON encodes a TokenRecord.
        value = (
            f'{{"activityId":"{activity}","activityStartedAt":"{iso(started)}",'
            f'"app":{{"bundleId":"{bundle}","environment":"{environment}"}},"appVersion":"{version}",'
            f'"attributesType":"{attributes}","deviceId":"{device}","frequentUpdatesEnabled":{frequent},'
            f'"kind":"update"{owner},"registeredAt":"{registered_text}","schemaVersion":1,"state":"active",'
            f'"token":"{rng.randbytes(80).hex()}","updatedAt":"{registered_text}","userId":"user-{rng.randrange(10_000_000)}"}}'
        )
        yield activity, f"{bundle}/{activity}", value.encode()


class BulkWriter:
    """A producer for loading a topic fast: big batches (tansu's cost of reading a partition grows
    with the number of batches in it, docs/operations.md; token-registry under a bulk load batches
    as well, linger.ms=50), each record to the partition given."""

    def __init__(self, bootstrap):
        from confluent_kafka import Producer

        self.failures = []
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 100,
            "batch.size": 1_000_000, "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        })

    def produce(self, topic, key, value, partition):
        def delivered(err, _msg):
            if err is not None:
                self.failures.append(str(err))

        while True:
            try:
                self.producer.produce(topic, key=key, value=value, partition=partition, on_delivery=delivered)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def finish(self, what):
        """Waits for every record (at most 120 s); exits naming `what` if any failed."""
        left = self.producer.flush(120)
        if self.failures or left:
            sys.exit(f"{what}: {len(self.failures)} records failed ({self.failures[:1]}), {left} not delivered")


def budget_value(key, value, partition, now_ms):
    """The dispatcher's budget of the activity whose token record is `value`: half of it spent a
    minute ago (12 an hour, 240 with frequent updates), sorted keys as IsletJSON writes them."""
    bundle, activity = key.split("/", 1)
    capacity = 240 if b'"frequentUpdatesEnabled":true' in value else 12
    updated = iso(now_ms - 60_000)
    return (
        f'{{"activityId":"{activity}","available":{capacity // 2},"bundleId":"{bundle}","capacity":{capacity},'
        f'"partition":{partition},"periodSeconds":3600,"schemaVersion":1,"updatedAt":"{updated}","writtenAt":"{updated}"}}'
    ).encode()


def load(bootstrap, count, partitions, budgets=False):
    check_vectors()
    writer = BulkWriter(bootstrap)
    per_partition = [0] * partitions
    total_bytes = 0
    now_ms = int(time.time() * 1000)
    start = time.monotonic()
    for activity, key, value in records(count):
        partition = partition_of(activity, partitions)
        per_partition[partition] += 1
        total_bytes += len(value)
        writer.produce("islet.tokens.v1", key, value, partition)
        if budgets:
            writer.produce("islet.dispatch-budgets.v1", key, budget_value(key, value, partition, now_ms), partition)
        if writer.failures:
            break
    writer.finish("load")
    print(json.dumps({
        "records": count, "bytes": total_bytes, "seconds": round(time.monotonic() - start, 2), "perPartition": per_partition,
        "budgets": count if budgets else 0}))


def memory_records(count, partitions, seed=1):
    """(activity id, key, value bytes) of a content-service memory for each of the COUNT activities
    whose tokens records() makes: an update delivered a few minutes ago, its request stored at an
    offset of islet.push-requests.v1, the activity started within the last hour, stale in 2 hours."""
    rng = random.Random(seed + 1)
    now_ms = int(time.time() * 1000)
    states = ["preparing", "courier_assigned", "out_for_delivery", "arriving"]
    offsets = [0] * partitions
    for activity, key, _ in records(count, seed):
        bundle = key.split("/", 1)[0]
        attributes = next(app[1] for app in APPS if app[0] == bundle)
        partition = partition_of(activity, partitions)
        offsets[partition] += 1
        created = now_ms - rng.randrange(600_000)
        started = created - rng.randrange(3_000_000)
        sequence = rng.randrange(1, 40)
        request = str(uuid.UUID(int=rng.getrandbits(128), version=5))
        state = states[sequence % 4]
        # Sorted keys, compact, as IsletJSON encodes a ContentMemoryRecord.
        value = (
            f'{{"activity":{{"activityId":"{activity}","bundleId":"{bundle}","contentRequestId":"{request}","ended":false,"gone":false,'
            f'"lastSequence":{sequence},"lastState":"{state}","lastTimestamp":{created // 1000},'
            f'"latest":{{"app":{{"bundleId":"{bundle}","environment":"production"}},"attributesType":"{attributes}","content":true,'
            f'"contentSequence":{sequence},"createdAt":"{iso(created)}","event":"update","requestId":"{request}",'
            f'"staleDate":"{iso(created + 7_200_000)}"}},"outcomes":[{{"requestId":"{request}","result":"delivered"}}],'
            f'"partition":{partition},"payloadStoredAt":{{"offset":{offsets[partition]},"partition":{partition}}},"resends":0,'
            f'"startedAt":"{iso(started)}"}},"schemaVersion":1,"writtenAt":"{iso(now_ms)}"}}'
        )
        yield activity, key, value.encode()


def load_memory(bootstrap, count, partitions):
    """COUNT memories onto islet.content-memory.v1, then a checkpoint per partition (the requests and
    outcomes topics are empty: every position 0)."""
    writer = BulkWriter(bootstrap)
    total_bytes = 0
    start = time.monotonic()
    for activity, key, value in memory_records(count, partitions):
        total_bytes += len(value)
        writer.produce("islet.content-memory.v1", key, value, partition_of(activity, partitions))
        if writer.failures:
            break
    written = iso(int(time.time() * 1000))
    positions = ",".join(
        f'{{"offset":0,"partition":{p},"topic":"{topic}"}}' for topic in ("islet.push-requests.v1", "islet.push-outcomes.v1") for p in range(partitions))
    for partition in range(partitions):
        value = f'{{"checkpoint":{{"partition":{partition},"positions":[{positions}]}},"schemaVersion":1,"writtenAt":"{written}"}}'
        writer.produce("islet.content-memory.v1", "checkpoint", value.encode(), partition)
    writer.finish("load-memory")
    print(json.dumps({"records": count, "bytes": total_bytes, "seconds": round(time.monotonic() - start, 2)}))


def metrics(url):
    """islet_tokens_table_size and islet_tokens_restore_seconds (sum, count) from /metrics."""
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception:
        print("-1 -1 -1")
        return
    found = {"islet_tokens_table_size": -1, "islet_tokens_restore_seconds_sum": -1, "islet_tokens_restore_seconds_count": -1}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            found[name] = float(line.rsplit(" ", 1)[1])
    print(" ".join(str(int(v)) if float(v).is_integer() else f"{v:.6f}" for v in found.values()))


def summary(path):
    r = json.load(open(path))
    mb = lambda kb: kb / 1024  # noqa: E731  (VmRSS is in kB)
    count = r["count"]
    per = (r["rss_one_kb"] - r["rss_base_kb"]) * 1024 / count if count else 0
    print()
    print(f"== apns-dispatcher's token partitions at {count:,} live activities, {r['partitions']} partitions (tansu, in memory)")
    print(f"records written straight onto islet.tokens.v1 (not through token-registry's API): {r['load_s']:.1f} s, "
          f"{r['load_bytes'] / count:.0f} bytes of JSON per record"
          + ("; and a spent budget per activity on islet.dispatch-budgets.v1 (read and held with the tokens)" if r.get("budgets") else ""))
    rows = [
        ("baseline (empty token topic)", f"{mb(r['rss_base_kb']):.1f} MB", f"{mb(r['hwm_base_kb']):.1f} MB", "0", ""),
        ("one instance, all partitions", f"{mb(r['rss_one_kb']):.1f} MB", f"{mb(r['hwm_one_kb']):.1f} MB", f"{r['tokens_one']:,}",
         f"restore {r['restore_s']:.2f} s (log), ready {r['ready_s']:.1f} s after start, {r['restore_cpu_s']:.1f} CPU s"),
        ("two instances: A (the first)", f"{mb(r['rss_two_a_kb']):.1f} MB", f"{mb(r['hwm_two_a_kb']):.1f} MB", f"{r['tokens_two_a']:,}",
         "kept its memory after giving up partitions" if r["rss_two_a_kb"] > 0.8 * r["rss_one_kb"] else ""),
        ("two instances: B (holds its half)", f"{mb(r['rss_two_b_kb']):.1f} MB", f"{mb(r['hwm_two_b_kb']):.1f} MB", f"{r['tokens_two_b']:,}",
         f"restore {r['restore_b_s']:.2f} s (log; A re-read its half in {r['restore_a2_s']:.2f} s), settled {r['rebalance_s']:.1f} s after B started"),
        (f"survivor {r['survivor']} after kill -9 of the other", f"{mb(r['rss_after_kb']):.1f} MB", f"{mb(r['hwm_after_kb']):.1f} MB",
         f"{r['tokens_after']:,}", f"all tokens again {r['failover_s']:.1f} s after the kill: {r['failover_s'] - r['failover_restore_s']:.1f} s "
         f"session timeout and rebalance, then a restore of {r['failover_restore_s']:.2f} s (log)"),
    ]
    widths = [max(len(row[i]) for row in rows + [("", "VmRSS", "VmHWM", "tokens", "")]) for i in range(4)]
    print(f"{'':<{widths[0]}}  {'VmRSS':>{widths[1]}}  {'VmHWM':>{widths[2]}}  {'tokens':>{widths[3]}}")
    for row in rows:
        print(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}  {row[4]}")
    print(f"per live activity: {per:.0f} bytes resident ((one instance − baseline) / {count:,}); "
          f"restore {r['restore_s'] / count * 100_000:.2f} s per 100,000 activities; the broker used {r['broker_cpu_restore_s']:.1f} CPU s "
          f"during the first restore; tansu's own RSS {mb(r['broker_rss_kb']):.0f} MB")
    fields = [
        ("count", count), ("partitions", r["partitions"]), ("budgets", r.get("budgets", 0)), ("load_s", f"{r['load_s']:.1f}"), ("restore_s", f"{r['restore_s']:.2f}"),
        ("restore_s_per_100k", f"{r['restore_s'] / count * 100_000:.3f}"), ("ready_s", f"{r['ready_s']:.1f}"),
        ("restore_cpu_s", f"{r['restore_cpu_s']:.1f}"), ("broker_cpu_s", f"{r['broker_cpu_restore_s']:.1f}"),
        ("rss_mb_base", f"{mb(r['rss_base_kb']):.1f}"), ("rss_mb_one", f"{mb(r['rss_one_kb']):.1f}"), ("hwm_mb_one", f"{mb(r['hwm_one_kb']):.1f}"),
        ("bytes_per_activity", f"{per:.0f}"), ("rss_mb_two_a", f"{mb(r['rss_two_a_kb']):.1f}"), ("rss_mb_two_b", f"{mb(r['rss_two_b_kb']):.1f}"),
        ("tokens_two_a", r["tokens_two_a"]), ("tokens_two_b", r["tokens_two_b"]), ("rebalance_s", f"{r['rebalance_s']:.1f}"),
        ("restore_b_s", f"{r['restore_b_s']:.2f}"), ("restore_a2_s", f"{r['restore_a2_s']:.2f}"), ("failover_s", f"{r['failover_s']:.1f}"),
        ("failover_wait_s", f"{r['failover_s'] - r['failover_restore_s']:.1f}"), ("failover_restore_s", f"{r['failover_restore_s']:.2f}"),
        ("rss_mb_after", f"{mb(r['rss_after_kb']):.1f}"), ("tokens_after", r["tokens_after"]),
    ]
    print("RESULT scale " + " ".join(f"{k}={v}" for k, v in fields))


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    command, args = argv[1], argv[2:]
    if command == "topics":
        topics(args[0], int(args[1]))
    elif command == "check-partitioner":
        check_partitioner(args[0], int(args[1]))
    elif command == "load":
        load(args[0], int(args[1]), int(args[2]), len(args) > 3 and args[3] == "1")
    elif command == "load-memory":
        load_memory(args[0], int(args[1]), int(args[2]))
    elif command == "metrics":
        metrics(args[0])
    elif command == "summary":
        summary(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
