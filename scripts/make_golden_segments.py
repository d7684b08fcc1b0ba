#!/usr/bin/env python3
"""Produce golden Kafka segment fixtures with a real client and a real broker.

Records are produced with confluent-kafka (librdkafka) into a real Apache Kafka
broker; the broker writes the segment files, which become test fixtures for
Runnel's storage engine (broker/tests/fixtures/kafka-segments/).

Two phases, because the segment files are only final after a clean shutdown
(the broker trims the preallocated .index/.timeindex files, appends the last
time-index entry and writes producer-state .snapshot files on close):

  1. produce BOOTSTRAP --state STATE.json
       against a running broker: create the golden-* topics, produce the
       deterministic records, read them back with confluent-kafka consumers
       (read_uncommitted, plus read_committed for golden-txn) and store what
       Kafka actually returned (offsets, timestamps, keys, values, headers,
       log end offsets) in STATE.json.
  2. finalize --state STATE.json --data-dir DIR --out FIXTURES --kafka-lib LIB
       after the broker was stopped cleanly: copy each <DIR>/golden-*-0/ into
       FIXTURES/<topic>-0/, dump every .log/.index/.timeindex with Kafka's
       own kafka.tools.DumpLogSegments, cross-check the dump against the
       consumer read-back, and write FIXTURES/manifest.json.

scripts/make_golden_segments.sh runs the whole thing (start broker, both
phases, stop broker) against the read-only harness in /work/shared/bench/kafka.
"""
import argparse
import base64
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

BASE_TS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Kafka 4.x rejects segment.bytes < 1 MiB (KIP-1030); the topic-level
# internal.segment.bytes (the override Kafka's own tests use) still allows
# small segments, so size-based rolling happens after ~16 KiB.
# golden-none: 16 KiB (its largest batch is ~10 KiB); golden-zstd: 4 KiB (its
# largest compressed batch is ~3 KiB), so both get several segments.
SMALL_SEGMENTS = {
    "none": {"internal.segment.bytes": "16384", "index.interval.bytes": "256"},
    "zstd": {"internal.segment.bytes": "4096", "index.interval.bytes": "256"},
}

# Group sizes (records per flush => per batch) for the 200-record codec topics.
CODEC_GROUPS = [1, 1, 2, 5, 10, 3, 20, 1, 7, 15, 12, 4, 20, 9, 1, 18, 6, 14, 20, 11, 20]
MIXED_GROUPS = [3, 7, 1, 12, 5, 9, 2, 15, 6, 10, 4, 8, 1, 11, 6]          # 100 records
LAT_GROUPS = [1, 4, 10, 2, 8, 5, 12, 3, 9, 6]                             # 60 records
MAX_GROUP_BYTES = 12_000  # keep every batch well below the 16 KiB segments


def b64(b):
    return None if b is None else base64.b64encode(b).decode("ascii")


# ---------------------------------------------------------------- record spec
def make_record(i, tag):
    """Deterministic record i (same content in every codec topic for a tag)."""
    rng = random.Random(f"{tag}:{i}")
    if i % 7 == 3:
        key = None
    elif i % 29 == 5:
        key = b""
    else:
        key = f"key-{i:04d}".encode()
    if i % 11 == 4:
        value = None                       # tombstone
    elif i % 13 == 6:
        value = b""                        # empty, non-null
    elif i % 6 == 0:
        n = rng.randint(1024, 3072)        # 1-3 KiB, 1/4 random + 3/4 text
        text = (f"record {i} of {tag}: the quick brown fox jumps over the lazy dog. " * 64).encode()
        value = rng.randbytes(n // 4) + text[: n - n // 4]
    else:
        value = f"value-{i:04d}-{tag}-{rng.randrange(10**6):06d}".encode()
    h = i % 4
    if h == 0:
        headers = None
    elif h == 1:
        headers = [("h1", f"v{i}".encode()), ("null-header", None)]
    elif h == 2:
        headers = [("trace-id", rng.randbytes(8)), ("dup", b"a"), ("dup", b"b")]
    else:
        headers = [("empty", b"")]
    return {"key": key, "value": value, "headers": headers, "timestamp": BASE_TS + i * 10}


def groups_of(sizes):
    start = 0
    for n in sizes:
        yield range(start, start + n)
        start += n


def check_groups(tag, sizes):
    for g in groups_of(sizes):
        size = 0
        for i in g:
            r = make_record(i, tag)
            size += 40 + len(r["key"] or b"") + len(r["value"] or b"")
            size += sum(len(k) + len(v or b"") + 4 for k, v in (r["headers"] or []))
        assert size < MAX_GROUP_BYTES, (tag, g, size)


# ---------------------------------------------------------------- phase 1
def producer_conf(bootstrap, codec, idempotent=True, max_group=20, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "enable.idempotence": idempotent,
        "acks": "all",
        # Large linger + batch.num.messages = largest group: each group is
        # accumulated into one batch and sent by the flush() that ends it.
        "linger.ms": 5000,
        "batch.num.messages": max_group,
    }
    conf.update(extra)
    return conf


def warm_up(p, topic):
    # Fetch metadata first, so messages go straight to the partition queue and
    # a group is never split by metadata arriving half-way through it.
    p.list_topics(topic, timeout=10)


def produce_group(p, topic, tag, idx):
    for i in idx:
        r = make_record(i, tag)
        kw = {"key": r["key"], "value": r["value"], "timestamp": r["timestamp"]}
        if r["headers"] is not None:
            kw["headers"] = r["headers"]
        p.produce(topic, partition=0, **kw)
    left = p.flush(30)
    assert left == 0, f"{topic}: {left} messages not delivered"


def delivery_errors():
    errs = []

    def cb(err, msg):
        if err is not None:
            errs.append(f"{msg.topic()}: {err}")
    return errs, cb


def create_topics(admin, specs):
    from confluent_kafka.admin import NewTopic
    new = [NewTopic(t, num_partitions=1, replication_factor=1, config=cfg) for t, cfg in specs]
    for t, f in admin.create_topics(new, operation_timeout=30).items():
        f.result()
        print(f"created {t} {dict(specs)[t]}", flush=True)


def read_back(bootstrap, topic, isolation):
    from confluent_kafka import Consumer, TopicPartition, KafkaError, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"golden-readback-{topic}-{isolation}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "check.crcs": True,
    })
    try:
        tp = TopicPartition(topic, 0)
        low, high = c.get_watermark_offsets(tp, timeout=10)
        c.assign([TopicPartition(topic, 0, 0)])
        out, deadline = [], time.time() + 60
        while time.time() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise RuntimeError(f"{topic}: {m.error()}")
            ttype, ts = m.timestamp()
            out.append({
                "offset": m.offset(),
                "timestamp": ts,
                "timestamp_type": {TIMESTAMP_CREATE_TIME: "CreateTime",
                                   TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}.get(ttype, str(ttype)),
                "key": b64(m.key()),
                "value": b64(m.value()),
                "headers": [[k, b64(v)] for k, v in (m.headers() or [])],
            })
        else:
            raise RuntimeError(f"{topic}: no EOF within 60 s")
        # the high watermark may still move while the read_committed LSO settles
        low, high = c.get_watermark_offsets(tp, timeout=10)
        return {"records": out, "low_watermark": low, "high_watermark": high}
    finally:
        c.close()


def expected_view(rec):
    return {"key": b64(rec["key"]), "value": b64(rec["value"]),
            "headers": [[k, b64(v)] for k, v in (rec["headers"] or [])]}


def phase_produce(args):
    import confluent_kafka
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    bs = args.bootstrap
    for tag, sizes in [("codec", CODEC_GROUPS), ("mixed", MIXED_GROUPS), ("lat", LAT_GROUPS)]:
        check_groups(tag, sizes)
    topics = {}   # topic -> description; "produced" = [(tag, i, codec, producer)]
    specs = []
    for codec in CODECS:
        cfg = dict(SMALL_SEGMENTS.get(codec, {}))
        specs.append((f"golden-{codec}", cfg))
    specs.append(("golden-mixed", {}))
    specs.append(("golden-logappendtime", {"message.timestamp.type": "LogAppendTime"}))
    specs.append(("golden-txn", {}))
    create_topics(AdminClient({"bootstrap.servers": bs}), specs)
    topic_cfg = dict(specs)

    errs, cb = delivery_errors()

    # 1. one topic per codec, one idempotent producer each, 200 records
    for codec in CODECS:
        topic = f"golden-{codec}"
        p = Producer(producer_conf(bs, codec, max_group=max(CODEC_GROUPS), on_delivery=cb))
        warm_up(p, topic)
        produced = []
        for g in groups_of(CODEC_GROUPS):
            produce_group(p, topic, "codec", g)
            produced += [("codec", i, codec) for i in g]
        topics[topic] = {"codec": codec, "producers": [f"idempotent {codec}"], "produced": produced}
        print(f"produced {len(produced)} to {topic}", flush=True)

    # 2. golden-mixed: one idempotent producer per codec, groups round-robin
    # Producers are created on first use, so the broker hands out producer
    # ids in codec order (none, gzip, snappy, lz4, zstd) on every run.
    ps = {}
    produced = []
    for n, g in enumerate(groups_of(MIXED_GROUPS)):
        codec = CODECS[n % len(CODECS)]
        if codec not in ps:
            ps[codec] = Producer(producer_conf(bs, codec, max_group=max(MIXED_GROUPS), on_delivery=cb))
            warm_up(ps[codec], "golden-mixed")
        produce_group(ps[codec], "golden-mixed", "mixed", g)
        produced += [("mixed", i, codec) for i in g]
    topics["golden-mixed"] = {"codec": "mixed", "producers": [f"idempotent {c}" for c in CODECS],
                              "produced": produced}
    print(f"produced {len(produced)} to golden-mixed", flush=True)

    # 3. golden-logappendtime: NON-idempotent producers (producerId -1),
    #    alternating uncompressed and lz4 groups
    ps = {c: Producer(producer_conf(bs, c, idempotent=False, max_group=max(LAT_GROUPS), on_delivery=cb))
          for c in ("none", "lz4")}
    for p in ps.values():
        warm_up(p, "golden-logappendtime")
    produced = []
    for n, g in enumerate(groups_of(LAT_GROUPS)):
        codec = ("none", "lz4")[n % 2]
        produce_group(ps[codec], "golden-logappendtime", "lat", g)
        produced += [("lat", i, codec) for i in g]
    topics["golden-logappendtime"] = {"codec": "none+lz4", "producers": ["non-idempotent none", "non-idempotent lz4"],
                                      "produced": produced}
    print(f"produced {len(produced)} to golden-logappendtime", flush=True)

    # 4. golden-txn: commit 3, abort 2, commit 2 (uncompressed)
    p = Producer(producer_conf(bs, "none", max_group=3, on_delivery=cb,
                               **{"transactional.id": "golden-txn-producer"}))
    warm_up(p, "golden-txn")
    p.init_transactions(30)
    produced, txns = [], []
    i = 0
    for n, outcome in [(3, "committed"), (2, "aborted"), (2, "committed")]:
        p.begin_transaction()
        idx = range(i, i + n)
        for j in idx:
            p.produce("golden-txn", partition=0, key=f"txn-key-{j}".encode(),
                      value=f"txn-value-{j}-{outcome}".encode(), timestamp=BASE_TS + j * 10,
                      headers=[("txn", outcome.encode())])
        p.flush(30)
        if outcome == "committed":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        produced += [("txn", j, "none", outcome) for j in idx]
        txns.append({"records": n, "outcome": outcome})
        i += n
    topics["golden-txn"] = {"codec": "none", "producers": ["transactional none (transactional.id=golden-txn-producer)"],
                            "produced": produced, "transactions": txns}
    print(f"produced {len(produced)} to golden-txn", flush=True)
    assert not errs, errs

    # ---- read back what Kafka stored (before the broker is stopped) ----
    state = {
        "bootstrap": bs,
        "librdkafka_version": confluent_kafka.libversion()[0],
        "confluent_kafka_version": confluent_kafka.__version__,
        "topics": {},
    }
    time.sleep(1)
    for topic, d in topics.items():
        rb = read_back(bs, topic, "read_uncommitted")
        recs = rb["records"]
        assert rb["low_watermark"] == 0
        # compare with what we produced (the content, not offsets)
        assert len(recs) == len(d["produced"]), (topic, len(recs), len(d["produced"]))
        for got, pr in zip(recs, d["produced"]):
            tag, i = pr[0], pr[1]
            if tag == "txn":
                exp = {"key": b64(f"txn-key-{i}".encode()), "value": b64(f"txn-value-{i}-{pr[3]}".encode()),
                       "headers": [["txn", b64(pr[3].encode())]]}
                got["txn_status"] = pr[3]
            else:
                exp = expected_view(make_record(i, tag))
            for k in ("key", "value", "headers"):
                assert got[k] == exp[k], (topic, got["offset"], k, got[k], exp[k])
            if topic != "golden-logappendtime":
                assert got["timestamp_type"] == "CreateTime" and got["timestamp"] == BASE_TS + i * 10, (topic, got)
            else:
                assert got["timestamp_type"] == "LogAppendTime", (topic, got)
            got["producer_codec"] = pr[2]
        entry = {
            "topic_config": topic_cfg[topic],
            "codec": d["codec"],
            "producers": d["producers"],
            "log_end_offset": rb["high_watermark"],
            "records": recs,
        }
        if topic == "golden-txn":
            rc = read_back(bs, topic, "read_committed")
            entry["transactions"] = d["transactions"]
            entry["read_committed_offsets"] = [r["offset"] for r in rc["records"]]
            entry["read_committed_high_watermark"] = rc["high_watermark"]
        state["topics"][topic] = entry
        print(f"read back {topic}: {len(recs)} records, log end offset {rb['high_watermark']}", flush=True)
    with open(args.state, "w") as f:
        json.dump(state, f, indent=1)
    print(f"wrote {args.state}")


# ---------------------------------------------------------------- phase 2
KV = re.compile(r"([A-Za-z]+): (\[[^\]]*\]|\S+)")


def conv(v):
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    if v.startswith("[") and v.endswith("]"):
        return [x for x in v[1:-1].split(",") if x]
    return {"true": True, "false": False}.get(v, v)


def kv(line):
    return {k: conv(v) for k, v in KV.findall(line)}


def dump_files(lib, paths, deep=False):
    """Run kafka.tools.DumpLogSegments once over several files; {path: [lines]}."""
    cmd = ["java", "-cp", os.path.join(lib, "*"), "kafka.tools.DumpLogSegments",
           "--files", ",".join(paths)]
    if deep:
        cmd.append("--deep-iteration")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res, cur = {}, None
    for line in out.splitlines():
        if line.startswith("Dumping "):
            cur = line[len("Dumping "):]
            res[cur] = []
        elif cur is not None:
            res[cur].append(line)
    assert sorted(res) == sorted(paths), (sorted(res), paths)
    return res


def parse_log_dump(lines):
    batches = []
    for line in lines:
        if line.startswith("baseOffset:"):
            batches.append(kv(line) | {"records": []})
        elif line.startswith("| offset:"):
            batches[-1]["records"].append(kv(line[2:]))
        elif not line.startswith("Log starting offset:"):
            raise ValueError(f"unexpected DumpLogSegments line: {line}")
    return batches


def parse_entries(lines, first_key):
    """Index / time index / txn index / producer snapshot entries."""
    entries = []
    for line in lines:
        if line.startswith(first_key + ":"):
            entries.append(kv(line))
        elif not line.endswith(" is empty."):
            raise ValueError(f"unexpected DumpLogSegments line: {line}")
    return entries


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def phase_finalize(args):
    with open(args.state) as f:
        state = json.load(f)
    with open(os.path.join(args.kafka_lib, "KAFKA_VERSION")) as f:
        kafka_version = f.read().strip()
    os.makedirs(args.out, exist_ok=True)
    manifest = {
        "description": "Kafka partition directories written by a real Apache Kafka broker from records "
                       "produced by librdkafka (confluent-kafka). Records below are what confluent-kafka "
                       "consumers read back from the running broker; segments/batches/index entries are "
                       "Kafka's own kafka.tools.DumpLogSegments output of the copied files.",
        "kafka_version": kafka_version,
        "librdkafka_version": state["librdkafka_version"],
        "confluent_kafka_version": state["confluent_kafka_version"],
        "generator": "scripts/make_golden_segments.py",
        "base_timestamp": BASE_TS,
        "notes": [
            "records[]: what confluent-kafka consumers (isolation.level=read_uncommitted, check.crcs=true) read "
            "back from the live broker, in offset order; key/value/header values are base64, null = null "
            "(null key, tombstone value, null header value), \"\" = present but empty.",
            "Control records are never returned by consumers; their offsets/markers (control_records) come from "
            "DumpLogSegments and fill exactly the offset gaps of records[].",
            "segments[].batches/index_entries/timeindex_entries/txnindex_entries and producer_snapshots are "
            "parsed kafka.tools.DumpLogSegments output of the copied files (--deep-iteration for .log). Index "
            "offsets are printed as absolute offsets; on disk .index/.timeindex store offset - base_offset.",
            "librdkafka sends a batch uncompressed when compressing does not make it smaller, so codec topics "
            "also hold some compresscodec=none batches (see batch_codecs).",
            "LogAppendTime batches (golden-logappendtime): attributes bit 3 set, maxTimestamp = broker time, "
            "baseTimestamp and record timestamp deltas keep the producer's CreateTime values; consumers report "
            "maxTimestamp for every record. These timestamps are wall-clock and differ on every run.",
            "Control batches carry the broker's wall-clock time. In golden-txn the segment rolled at offset 3: "
            "time-based rolling (segment.ms, 7 days) compares the incoming batch's max timestamp with the first "
            "batch timestamp of the segment (1700000000020).",
            "Kafka 4.x rejects segment.bytes < 1 MiB; small segments use the topic config internal.segment.bytes.",
            "Files are as left by a clean shutdown: .index/.timeindex trimmed to their entries, the active "
            "segment's last .timeindex entry appended on close, producer-state .snapshot files written at every "
            "roll (named after the new segment's base offset) and at shutdown (named after the log end offset).",
        ],
        "topics": {},
    }
    for topic, t in state["topics"].items():
        src = os.path.join(args.data_dir, f"{topic}-0")
        dst = os.path.join(args.out, f"{topic}-0")
        if os.path.exists(dst):
            shutil.rmtree(dst)
        os.makedirs(dst)
        files = sorted(os.listdir(src))
        for name in files:
            shutil.copy2(os.path.join(src, name), os.path.join(dst, name))
        segments, all_batches = [], []
        # DumpLogSegments prints index offsets as absolute offsets (on disk they
        # are relative to the segment base offset).
        paths = [os.path.join(dst, n) for n in files
                 if re.fullmatch(r"\d{20}\.(index|timeindex|txnindex|snapshot)", n)]
        dumped = dump_files(args.kafka_lib, paths)
        logs = [os.path.join(dst, n) for n in files if n.endswith(".log")]
        dumped_logs = dump_files(args.kafka_lib, logs, deep=True)
        for name in files:
            if not name.endswith(".log"):
                continue
            base = name[:-4]
            seg = {"base_offset": int(base), "files": {}}
            for ext in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
                p = os.path.join(dst, base + ext)
                if os.path.exists(p):
                    seg["files"][base + ext] = {"size": os.path.getsize(p), "sha256": sha256(p)}
            seg["batches"] = parse_log_dump(dumped_logs[os.path.join(dst, name)])
            seg["index_entries"] = parse_entries(dumped[os.path.join(dst, base + ".index")], "offset")
            seg["timeindex_entries"] = parse_entries(dumped[os.path.join(dst, base + ".timeindex")], "timestamp")
            if os.path.join(dst, base + ".txnindex") in dumped:
                seg["txnindex_entries"] = parse_entries(dumped[os.path.join(dst, base + ".txnindex")], "version")
            all_batches += seg["batches"]
            segments.append(seg)
        snapshots = {n: parse_entries(dumped[os.path.join(dst, n)], "producerId")
                     for n in files if n.endswith(".snapshot")}
        other = {n: {"size": os.path.getsize(os.path.join(dst, n)), "sha256": sha256(os.path.join(dst, n))}
                 for n in files if not re.fullmatch(r"\d{20}\.(log|index|timeindex|txnindex|snapshot)", n)}

        # ---- cross-check DumpLogSegments against the consumer read-back ----
        by_off = {r["offset"]: r for r in t["records"]}
        leo = t["log_end_offset"]
        assert all_batches[-1]["lastOffset"] + 1 == leo, (topic, all_batches[-1], leo)
        control = []
        nxt = 0
        for b in all_batches:
            assert b["baseOffset"] == nxt, (topic, b, nxt)
            assert b["isvalid"] is True, (topic, b)
            nxt = b["lastOffset"] + 1
            offs = [r["offset"] for r in b["records"]]
            assert offs == list(range(b["baseOffset"], b["lastOffset"] + 1)), (topic, b)
            if b["isControl"]:
                for r in b["records"]:
                    control.append({"offset": r["offset"], "marker": r.get("endTxnMarker"),
                                    "coordinatorEpoch": r.get("coordinatorEpoch")})
                    assert r["offset"] not in by_off
            else:
                for r in b["records"]:
                    c = by_off[r["offset"]]
                    assert r["keySize"] == (-1 if c["key"] is None else len(base64.b64decode(c["key"]))), (topic, r, c)
                    assert r["valueSize"] == (-1 if c["value"] is None else len(base64.b64decode(c["value"]))), (topic, r, c)
                    assert r["headerKeys"] == [h[0] for h in c["headers"]], (topic, r, c)
                    if b.get("CreateTime") is not None:
                        assert r["CreateTime"] == c["timestamp"], (topic, r, c)
                    c["batch_base_offset"] = b["baseOffset"]
        data_offsets = sorted(by_off)
        assert sorted(data_offsets + [c["offset"] for c in control]) == list(range(leo)), topic

        entry = {
            "partition_dir": f"{topic}-0",
            "codec": t["codec"],
            "batch_codecs": sorted({b["compresscodec"] for b in all_batches}),
            "topic_config": t["topic_config"],
            "producers": t["producers"],
            "num_segments": len(segments),
            "log_start_offset": 0,
            "log_end_offset": leo,
            "num_batches": len(all_batches),
            "num_data_records": len(t["records"]),
            "control_records": control,
            "other_files": other,
            "producer_snapshots": snapshots,
            "segments": segments,
            "records": t["records"],
        }
        if topic == "golden-txn":
            committed = [r["offset"] for r in t["records"] if r["txn_status"] == "committed"]
            aborted = [r["offset"] for r in t["records"] if r["txn_status"] == "aborted"]
            assert committed == t["read_committed_offsets"], (committed, t["read_committed_offsets"])
            entry["transactions"] = t["transactions"]
            entry["committed_data_offsets"] = committed
            entry["aborted_data_offsets"] = aborted
            entry["control_offsets"] = [c["offset"] for c in control]
            entry["read_committed_offsets"] = t["read_committed_offsets"]
            entry["read_uncommitted_offsets"] = data_offsets
        manifest["topics"][topic] = entry
        print(f"{topic}: {len(segments)} segment(s), {len(all_batches)} batches, LEO {leo}, "
              f"codecs {entry['batch_codecs']}, control {[c['offset'] for c in control]}")
    path = os.path.join(args.out, "manifest.json")
    with open(path, "w") as f:
        f.write(to_json(manifest) + "\n")
    print(f"wrote {path}")


def to_json(o, ind=0):
    """Indented JSON, but each element of a list of objects (records, batches,
    index entries, ...) on one line, to keep the manifest small and diffable."""
    pad, pad1 = " " * ind, " " * (ind + 1)
    if isinstance(o, dict) and o:
        items = [f"{pad1}{json.dumps(k)}: {to_json(v, ind + 1)}" for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(o, list) and o and all(isinstance(x, (dict, str)) for x in o):
        return "[\n" + ",\n".join(pad1 + json.dumps(x, separators=(",", ":")) for x in o) + "\n" + pad + "]"
    return json.dumps(o)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("bootstrap")
    p.add_argument("--state", required=True)
    f = sub.add_parser("finalize")
    f.add_argument("--state", required=True)
    f.add_argument("--data-dir", required=True, help="the broker's log.dirs (…/kraft)")
    f.add_argument("--out", required=True)
    f.add_argument("--kafka-lib", default=os.path.expanduser("~/.cache/kafka-anchor/lib"))
    args = ap.parse_args()
    {"produce": phase_produce, "finalize": phase_finalize}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
