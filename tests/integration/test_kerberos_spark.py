"""PySpark on the standalone cluster (Master + 2 Workers) reading a kerberized topic, executors logging in by keytab.

The cluster is ``ProjectCluster(kerberos=True)`` (a real MIT KDC, ZooKeeper with SASL, a Kafka
0.9.0.1 broker with a SASL_PLAINTEXT listener); messages are produced through its PLAINTEXT
listener, every Spark read goes through SASL_PLAINTEXT and ZooKeeper SASL, with
``zookeeper.acl.enable``.

How the executors get their credentials, as a site would give them:

* the keytab is shipped with ``spark.files`` (``spark-submit --files``) and named by its file
  name, ``sasl.kerberos.keytab=zkclient.keytab``: executors find it in the task's working
  directory, the driver among its Spark files (``spark_integration.credentials``);
* ``KRB5_CONFIG`` reaches the executors through ``spark.executorEnv.KRB5_CONFIG`` only: the
  Workers (started before this module's KDC) do not have it, which the first test checks;
* for the ticket-cache test, ``spark.executorEnv.KRB5CCNAME`` names a cache filled by ``kinit``
  (the test cluster's executors share one host; a real cluster needs one per executor host).

The tests read through the streaming ``zkconsumer`` source, ``create_rdd`` (with
``commit_offset_ranges``) and ``foreach_stream``'s members.

The driver (this process, and the driver JVM's Python workers that plan the ``zkconsumer``
source) gets ``KRB5_CONFIG`` from the environment. This module is pickled by value.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest
from support.common import consumer_props, unique

from spark_integration import KafkaStreamSource, commit_offset_ranges, create_rdd, register_data_source
from spark_integration.group_view import GroupView
from zkconsumer.config import ConsumerConfig

pytest.importorskip("gssapi", reason="the Kerberos tests need the kerberos extra: pip install -e '.[kerberos]'")

from support.kerberos import kerberized_or_skip  # noqa: E402

from harness.cluster import ProjectCluster  # noqa: E402
from harness.cluster.kerberos import CLIENT  # noqa: E402

pytestmark = pytest.mark.spark

Record = Tuple[int, int]  # (partition, offset)


@pytest.fixture(scope="module")
def kerberized(spark_cluster) -> Iterator[ProjectCluster]:
    """The kerberized cluster; ``spark_cluster`` comes first, so its Workers never see ``KRB5_CONFIG``."""
    yield from kerberized_or_skip(brokers=1, partitions=2)


@pytest.fixture(scope="module")
def spark(spark_cluster, kerberized: ProjectCluster, tmp_path_factory: pytest.TempPathFactory):
    """The session: keytab in ``spark.files``, ``KRB5_CONFIG`` and (for the ticket-cache test) a
    ``KRB5CCNAME`` filled by ``kinit`` in ``spark.executorEnv``."""
    from pyspark import cloudpickle

    ccache = f"FILE:{tmp_path_factory.mktemp('krb5cc') / 'zkclient.ccache'}"
    kerberized.kdc.kinit(CLIENT, kerberized.kdc.keytab(CLIENT), ccache)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    session = spark_cluster.session("zkconsumer kerberos tests", **{
        "spark.files": str(kerberized.kdc.keytab(CLIENT)),
        "spark.executorEnv.KRB5_CONFIG": str(kerberized.kdc.krb5_conf),
        "spark.executorEnv.KRB5CCNAME": ccache,
    })
    session.sparkContext.setLogLevel("ERROR")
    register_data_source(session)
    yield session
    session.stop()
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def spark_props(cluster: ProjectCluster, group: str, **extra: object) -> Dict[str, str]:
    """Kerberos properties as a job passes them: the keytab by its shipped file name."""
    props = consumer_props(cluster, group, **extra)
    props.update(cluster.kerberos_consumer_properties(CLIENT))
    props.update({"sasl.kerberos.keytab": cluster.kdc.keytab(CLIENT).name, "zookeeper.acl.enable": "true"})
    return {k: str(v) for k, v in props.items()}


def produce(cluster: ProjectCluster, partitions: int = 2, n: int = 40) -> Tuple[str, List[Record]]:
    topic = cluster.create_topic(unique("krb-spark"), partitions=partitions)
    return topic, sorted(cluster.produce(topic, [f"m{i}" for i in range(n)]))


def check_group(cluster: ProjectCluster, group: str, topic: str, placed: List[Record]) -> None:
    """Offsets committed at the log end, read back as the same identity; the group's nodes carry sasl ACLs."""
    from kazoo.security import ACL, Id, Permissions

    config = ConsumerConfig({**spark_props(cluster, group), "sasl.kerberos.keytab": str(cluster.kdc.keytab(CLIENT))})
    ends = {p: max(o for q, o in placed if q == p) + 1 for p, _ in placed}
    with GroupView(config) as view:  # ZooKeeper SASL as zkclient@REALM
        assert view.committed([(topic, p) for p in ends]) == {(topic, p): end for p, end in ends.items()}
    ours = [ACL(Permissions.ALL, Id("sasl", f"{CLIENT}@{cluster.kdc.realm}")),
            ACL(Permissions.READ, Id("world", "anyone"))]
    reader = cluster.kazoo_client()
    for p in ends:
        assert reader.get_acls(f"/consumers/{group}/offsets/{topic}/{p}")[0] == ours


# --------------------------------------------------------------------------- executor side


def where_am_i(keytab_name: str, _: object) -> str:
    """Facts about the executor a task runs on, as JSON (its JVM, cwd, KRB5_CONFIG, the shipped keytab)."""
    from pyspark import SparkFiles

    jvm = int(Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return json.dumps({"jvm": jvm, "krb5_config": os.environ.get("KRB5_CONFIG"),
                       "keytab_here": Path(keytab_name).is_file(),
                       "spark_files": SparkFiles.getRootDirectory(), "cwd": os.getcwd()})


def record_stream(record_dir: str, stream) -> int:
    """foreach_stream handler: every message's (partition, offset), and the member's executor JVM."""
    from pyspark import TaskContext

    jvm = int(Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[1])
    with open(Path(record_dir, f"{TaskContext.get().taskAttemptId()}.rec"), "w") as out:
        out.write(f"jvm {jvm}\n")
        for m in stream:
            out.write(f"{m.partition} {m.offset}\n")
    return stream.count


def read_records(record_dir: Path) -> Tuple[List[Record], Set[int]]:
    """What the ``record_stream`` handlers recorded: every (partition, offset), and their executor JVMs."""
    records: List[Record] = []
    jvms: Set[int] = set()
    for path in record_dir.glob("*.rec"):
        head, *rows = path.read_text().splitlines()
        jvms.add(int(head.split()[1]))
        records += [(int(p), int(o)) for p, o in (row.split() for row in rows)]
    return records, jvms


# --------------------------------------------------------------------------- tests


def test_executors_get_krb5_conf_from_executor_env_and_the_keytab_from_spark_files(
    spark, spark_cluster, kerberized: ProjectCluster
) -> None:
    for worker in spark_cluster.worker_pids():  # so only spark.executorEnv can give it to executors
        assert b"KRB5_CONFIG=" not in Path(f"/proc/{worker}/environ").read_bytes()
    keytab = kerberized.kdc.keytab(CLIENT)
    facts = [json.loads(f) for f in spark.sparkContext.parallelize(range(8), 8)
             .map(functools.partial(where_am_i, keytab.name)).collect()]
    assert {f["krb5_config"] for f in facts} == {str(kerberized.kdc.krb5_conf)}
    assert all(f["keytab_here"] and f["spark_files"] in (".", f["cwd"]) for f in facts), facts
    assert not any(f["cwd"] == str(keytab.parent) for f in facts)


def test_streaming_source_reads_a_kerberized_topic_and_commits_under_sasl_acls(
    spark, kerberized: ProjectCluster, tmp_path: Path
) -> None:
    topic, placed = produce(kerberized)
    group = unique("g-krb-spark-source")
    reader = spark.readStream.format("zkconsumer").option("topics", topic)
    for key, value in spark_props(kerberized, group).items():
        reader = reader.option(key, value)
    query = (reader.load().select("partition", "offset").writeStream.format("parquet")
             .option("path", str(tmp_path / "sink")).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    rows = sorted((r.partition, r.offset) for r in spark.read.parquet(str(tmp_path / "sink")).collect())
    assert rows == placed  # every message once
    check_group(kerberized, group, topic, placed)


def test_create_rdd_reads_a_kerberized_topic_and_commit_offset_ranges_writes_under_sasl_acls(
    spark, kerberized: ProjectCluster
) -> None:
    """The driver plans (and commits) with the keytab from its Spark files, the executors read with theirs."""
    topic, placed = produce(kerberized)
    group = unique("g-krb-spark-rdd")
    props = spark_props(kerberized, group)
    rdd = create_rdd(spark.sparkContext, props, [topic])
    assert sorted(rdd.map(lambda m: (m.partition, m.offset)).collect()) == placed
    commit_offset_ranges(props, rdd.offset_ranges)
    check_group(kerberized, group, topic, placed)


def test_foreach_stream_members_read_a_kerberized_topic_and_commit_under_sasl_acls(
    spark, spark_cluster, kerberized: ProjectCluster, tmp_path: Path
) -> None:
    topic, placed = produce(kerberized)
    group = unique("g-krb-spark-members")
    source = KafkaStreamSource(spark_props(kerberized, group, consumer_timeout_ms=3000), {topic: 2},
                               settle_timeout_s=30)
    results = source.foreach_stream(spark.sparkContext, functools.partial(record_stream, str(tmp_path)))
    records, jvms = read_records(tmp_path)
    assert sorted(records) == placed  # every message once (no task failed)
    assert sum(r.messages for r in results) == len(placed)
    assert jvms <= set(spark_cluster.executor_pids()) and os.getpid() not in jvms
    check_group(kerberized, group, topic, placed)


def test_foreach_stream_members_log_in_from_a_ticket_cache_given_by_executor_env(
    spark, kerberized: ProjectCluster, tmp_path: Path
) -> None:
    """No keytab in the properties: each executor process reads the cache ``KRB5CCNAME`` names."""
    topic, placed = produce(kerberized)
    group = unique("g-krb-spark-ccache")
    props = spark_props(kerberized, group, consumer_timeout_ms=3000)
    del props["sasl.kerberos.keytab"], props["sasl.kerberos.principal"]
    source = KafkaStreamSource(props, {topic: 2}, settle_timeout_s=30)
    source.foreach_stream(spark.sparkContext, functools.partial(record_stream, str(tmp_path)))
    assert sorted(read_records(tmp_path)[0]) == placed
    check_group(kerberized, group, topic, placed)  # the cache's principal: sasl:zkclient@REALM ACLs


def test_a_keytab_missing_on_the_executors_is_named(spark, kerberized: ProjectCluster) -> None:
    topic, _ = produce(kerberized, n=4)
    props = spark_props(kerberized, unique("g-krb-spark-nokeytab"), consumer_timeout_ms=1000)
    props["sasl.kerberos.keytab"] = "not-shipped.keytab"
    source = KafkaStreamSource(props, {topic: 1})
    with pytest.raises(Exception) as info:
        source.foreach_stream(spark.sparkContext, len)
    text = str(info.value)
    assert "ConfigurationError" in text and "sasl.kerberos.keytab" in text
    assert "cannot read keytab 'not-shipped.keytab'" in text and "--files" in text
