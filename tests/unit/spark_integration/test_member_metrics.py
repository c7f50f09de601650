"""foreach_stream members' metrics options: validation on the driver, ports per member, pickling (no cluster)."""

from __future__ import annotations

import pytest
from pyspark import cloudpickle

from spark_integration.options import MemberMetrics
from spark_integration.streams import KafkaStreamSource
from zkconsumer import ConfigurationError

PROPS = {"zookeeper.connect": "zk:2181", "group.id": "g", "consumer.timeout.ms": 500}


def test_each_member_gets_base_port_plus_its_partition_index() -> None:
    assert [MemberMetrics(port=9400).port_for(i) for i in range(3)] == [9400, 9401, 9402]
    assert MemberMetrics(port=0).port_for(5) == 0          # a free port each
    assert MemberMetrics(pushgateway="gw:9091").port_for(0) is None
    assert not MemberMetrics().enabled and MemberMetrics(port=0).enabled and MemberMetrics(pushgateway="g:1").enabled


@pytest.mark.parametrize("kwargs, prop", [
    ({"metrics_port": -1}, "metrics_port"),
    ({"metrics_port": "9400"}, "metrics_port"),
    ({"metrics_port": True}, "metrics_port"),
    ({"metrics_port": 65535}, "metrics_port"),            # 3 members need 65535..65537
    ({"metrics_pushgateway": "  "}, "metrics_pushgateway"),
])
def test_bad_metrics_options_fail_on_the_driver_naming_the_option(kwargs, prop) -> None:
    with pytest.raises(ConfigurationError) as info:
        KafkaStreamSource(PROPS, {"t": 3}, **kwargs)
    assert info.value.property == prop


def test_the_task_carries_the_metrics_options_to_the_executors() -> None:
    source = KafkaStreamSource(PROPS, {"t": 2}, metrics_port=9400, metrics_pushgateway="gw:9091")
    task = cloudpickle.loads(cloudpickle.dumps(source.partition_handler(len)))
    assert task.metrics == MemberMetrics(9400, "gw:9091")
    assert KafkaStreamSource(PROPS, {"t": 2}).metrics == MemberMetrics()
