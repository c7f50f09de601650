"""The JSON forms of Spark's Kafka source (its ``JsonUtils``), pure: parsing options, writing offsets.

Spark's Kafka source writes partitions and offsets as JSON objects keyed by
topic, partitions as strings in the inner object::

    assign:                       {"topicA":[0,1],"topicB":[2]}
    startingOffsets, offsets:     {"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}
    startingOffsetsByTimestamp:   {"topicA":{"0":1700000000000}}

The ``zkconsumer`` source checkpoints its offsets in that same form
(:func:`source_offsets`), so a query's position can be handed to Spark's own
Kafka source as its ``startingOffsets`` after a migration. It still reads the
form it wrote before, ``{"topic/0": 23}`` (:func:`read_source_offsets`), so
older checkpoints resume.

    >>> source_offsets({("b", 1): 7, ("a", 10): 1, ("a", 2): 5})
    {'a': {'2': 5, '10': 1}, 'b': {'1': 7}}
    >>> read_source_offsets({'a': {'2': 5}}) == read_source_offsets({'a/2': 5}) == {('a', 2): 5}
    True
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Tuple

from zkconsumer import ConfigurationError
from zkconsumer.structs import TopicPartition

from .ranges import decode_offsets

__all__ = ["parse_assign", "parse_partition_numbers", "source_offsets", "source_offsets_json", "read_source_offsets",
           "ASSIGN_EXAMPLE", "OFFSETS_EXAMPLE", "TIMESTAMPS_EXAMPLE"]

ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'
OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'


def _loads(option: str, text: str, example: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ConfigurationError(option, f"invalid value {text!r}: expected e.g. {example}") from None


def parse_assign(text: str) -> Tuple[TopicPartition, ...]:
    """Spark's ``assign``: ``{"topic":[0,1]}`` as sorted ``(topic, partition)`` pairs; ConfigurationError.

    >>> parse_assign('{"b":[1],"a":[2,0]}')
    (('a', 0), ('a', 2), ('b', 1))
    """
    text = str(text).strip()
    if not text.startswith("{"):
        # Spark's own message for this case
        raise ConfigurationError("assign", f"No topicpartitions to assign as specified value for option 'assign' "
                                           f"is '{text}' (expected e.g. {ASSIGN_EXAMPLE})")
    parsed = _loads("assign", text, ASSIGN_EXAMPLE)
    bad = f"invalid value {text!r}: expected e.g. {ASSIGN_EXAMPLE}"
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigurationError("assign", bad)
    found: List[TopicPartition] = []
    for topic, partitions in parsed.items():
        if not topic or not isinstance(partitions, list) or not partitions:
            raise ConfigurationError("assign", f"{bad}; topic {topic!r} needs a non-empty list of partitions")
        for partition in partitions:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise ConfigurationError("assign", f"{bad}; {partition!r} of {topic!r} is not a partition number")
            found.append((str(topic), partition))
    return tuple(sorted(set(found)))


def parse_partition_numbers(option: str, text: str, example: str, minimum: int,
                            meaning: str) -> Dict[TopicPartition, int]:
    """``{"topic":{"0":n}}`` (Spark's ``JsonUtils.partitionOffsets``/``partitionTimestamps``) as a dict.

    Every number must be an integer ``>= minimum``; ``meaning`` says what the
    numbers are, in the error. ConfigurationError naming ``option``.

    >>> parse_partition_numbers("startingOffsets", '{"t":{"0":23,"1":-2}}', OFFSETS_EXAMPLE, -2, "")
    {('t', 0): 23, ('t', 1): -2}
    """
    text = str(text).strip()
    bad = f"invalid value {text!r}: expected e.g. {example}"
    parsed = _loads(option, text, example)
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigurationError(option, bad)
    numbers: Dict[TopicPartition, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise ConfigurationError(option, f"{bad}; topic {topic!r} has no partition object")
        for partition, number in partitions.items():
            if not str(partition).isdigit():
                raise ConfigurationError(option, f"{bad}; {partition!r} of {topic!r} is not a partition")
            if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
                raise ConfigurationError(option, f"{bad}; {number!r} of {topic}/{partition} is not {meaning}")
            numbers[(str(topic), int(partition))] = number
    return numbers


def source_offsets(offsets: Mapping[TopicPartition, int]) -> Dict[str, Dict[str, int]]:
    """``{(topic, partition): offset}`` in the form Spark's Kafka source checkpoints (topics and partitions sorted)."""
    nested: Dict[str, Dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return nested


def source_offsets_json(offsets: Mapping[TopicPartition, int]) -> str:
    """:func:`source_offsets` as compact JSON, as Spark writes it: a value for ``startingOffsets``.

    >>> source_offsets_json({("t", 1): 456, ("t", 0): 123})
    '{"t":{"0":123,"1":456}}'
    """
    return json.dumps(source_offsets(offsets), separators=(",", ":"))


def read_source_offsets(offsets: Mapping[str, Any]) -> Dict[TopicPartition, int]:
    """Offsets in Spark's form ``{"t":{"0":5}}`` or the older ``{"t/0":5}``; ``ValueError`` if malformed."""
    if not all(isinstance(value, dict) for value in offsets.values()):
        return decode_offsets(offsets)
    result: Dict[TopicPartition, int] = {}
    for topic, partitions in offsets.items():
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValueError(f"malformed offset {offset!r} for {topic}/{partition}: expected "
                                 "{\"topic\":{\"<partition>\":<offset >= 0>}}")
            result[(str(topic), int(partition))] = offset
    return result
