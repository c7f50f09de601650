"""The latency benchmark's phase plan: isolated phases each with their own floor, the order rotated."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.latency.producer import linger_ms
from benchmarks.latency.run import format_table, in_table_order, parse, parse_props, props_for, props_line, schedule

ALL = ["floor", "zkconsumer", "zkconsumer-batch", "kafka", "confluent"]


def test_isolated_gives_every_kind_its_own_phase_with_the_floor():
    plan = schedule([1000, 10000], ["defaults", "tuned"], ALL, "isolated")
    assert len(plan) == 2 * 2 * 4
    assert all(kinds[0] == "floor" and len(kinds) == 2 for _, _, kinds in plan)
    per_pair = Counter((rate, setting) for rate, setting, _ in plan)
    assert set(per_pair.values()) == {4}


def test_isolated_rotates_which_kind_goes_first():
    plan = schedule([1000, 10000], ["defaults", "tuned"], ALL, "isolated")
    firsts = [plan[i][2][1] for i in range(0, len(plan), 4)]
    assert firsts == ["zkconsumer", "zkconsumer-batch", "kafka", "confluent"]


def test_isolated_adds_the_floor_and_together_keeps_the_kinds():
    assert schedule([1000], ["defaults"], ["kafka"], "isolated") == [(1000, "defaults", ["floor", "kafka"])]
    assert schedule([1000], ["defaults"], ["floor"], "isolated") == [(1000, "defaults", ["floor"])]
    assert schedule([1000, 10000], ["tuned"], ALL, "together") == [(1000, "tuned", ALL), (10000, "tuned", ALL)]


def _result(kind, p99):
    return {"kind": kind, "count": 10, "p50_ms": 1.0, "p99_ms": p99, "p999_ms": p99, "max_ms": p99,
            "cpu_s_per_m": 1.0}


def test_the_table_subtracts_each_phases_own_floor_and_lists_kinds_in_order():
    phases = [{"position": 1, "rate": 1000, "setting": "defaults", "kinds": ["floor", "kafka"], "load": [0, 1.5],
               "steal_pct": 0.1, "results": [_result("floor", 5.0), _result("kafka", 8.0)]},
              {"position": 2, "rate": 1000, "setting": "defaults", "kinds": ["floor", "zkconsumer"],
               "load": [0, 1.2], "steal_pct": 0.1, "results": [_result("floor", 2.0), _result("zkconsumer", 9.0)]}]
    ordered = in_table_order(phases)
    assert [p["position"] for p in ordered] == [2, 1]
    rows = format_table(ordered).splitlines()[2:]
    assert "zkconsumer" in rows[1] and rows[1].split()[9] == "7.0"
    assert "kafka" in rows[3] and rows[3].split()[9] == "3.0"


def test_the_floor_row_carries_its_phases_producer_acknowledgement_p99():
    phase = {"position": 1, "rate": 10000, "setting": "defaults", "kinds": ["floor", "kafka"], "load": [0, 1.5],
             "steal_pct": 0.1, "producer": {"ack_p99_ms": 11.25},
             "results": [_result("floor", 5.0), _result("kafka", 8.0)]}
    floor_row, kafka_row = format_table([phase]).splitlines()[2:]
    assert floor_row.split()[-1] == "11.2" and kafka_row.split()[-1] == "0.1"  # the kafka row ends at steal
    older = {**phase, "producer": {"sent": 1}}  # results saved before the producer reported it
    assert format_table([older]).splitlines()[2].split()[-1] == "0.1"


def test_the_producer_lingers_longer_only_above_1000_messages_a_second():
    assert [linger_ms(rate) for rate in (100, 1000, 1001, 10000, 100000)] == [1, 1, 5, 5, 5]


def test_an_idle_phase_shows_each_kinds_cpu_as_a_share_of_one_core():
    idle = {"position": 1, "rate": 0, "setting": "defaults", "kinds": ["floor", "kafka"], "load": [0, 0.5],
            "steal_pct": 0.0, "seconds": 20.0,
            "results": [{**_result("floor", 0.0), "count": 0, "cpu_s": 0.1},
                        {**_result("kafka", 0.0), "count": 0, "cpu_s": 0.4, "cpu_s_per_m": None}]}
    floor_row, kafka_row = format_table([idle]).splitlines()[2:]
    assert "0.50%" in floor_row and "2.00%" in kafka_row  # 0.1 s and 0.4 s of CPU over 20 s


def test_zk_props_are_parsed_in_order_and_recorded_on_the_arguments():
    args = parse(["--quick", "--zk-prop", "fetcher.connections=1", "--zk-prop", "client.id=a=b",
                  "--zk-prop", "fetcher.connections=2"])
    assert args.zk_props == {"fetcher.connections": "2", "client.id": "a=b"}  # the later value wins
    assert parse(["--quick"]).zk_props == {}


def test_a_zk_prop_without_a_name_and_value_is_refused():
    for bad in ("fetcher.connections", "=1"):
        with pytest.raises(SystemExit):
            parse(["--zk-prop", bad])
    with pytest.raises(SystemExit):
        parse(["--rebalance", "--zk-prop", "fetcher.connections=1"])
    with pytest.raises(ValueError, match="not name=value"):
        parse_props(["fetcher.connections"])


def test_zk_props_go_to_the_zkconsumer_kinds_only_and_are_named_above_the_table():
    props = {"fetcher.connections": "1"}
    assert props_for("zkconsumer", props) == props and props_for("zkconsumer-batch", props) == props
    assert [props_for(kind, props) for kind in ("floor", "kafka", "confluent")] == [None, None, None]
    assert props_for("zkconsumer", {}) is None
    assert props_line(props) == "zkconsumer kinds with: fetcher.connections=1"
    assert props_line({}) == ""
