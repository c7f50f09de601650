"""The nodes of a live group-wide seek (``zkconsumer offsets seek``): format only.

``/consumers/<g>/seek`` (persistent) holds the pending request, JSON::

    {"version": 1, "id": "<hex>", "target": "<what was asked, for people>",
     "offsets": {"<topic>": {"<partition>": <offset>, ...}, ...}}

Each partition's owner, once it moved the partition to its target and committed it
(fenced by its owner node), acknowledges it with a child
``/consumers/<g>/seek/<id>:<topic>:<partition>`` (``:`` never occurs in a topic name),
JSON ``{"consumer": "<thread id>", "offset": <offset>}``. The request is deleted by the
command once every partition is acknowledged (or cancelled); acknowledgements of an
earlier request never count for a later one (the id is in their names). Kafka's tools
ignore the node.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from ..errors import MalformedZnodeError
from ..structs import TopicPartition

__all__ = ["SeekRequest", "seek_path", "ack_name", "parse_ack_name", "encode_request", "decode_request",
           "encode_ack"]


def seek_path(group_root: str) -> str:
    """``/consumers/<g>/seek`` from ``/consumers/<g>``."""
    return f"{group_root}/seek"


@dataclass(frozen=True)
class SeekRequest:
    """A pending seek: ``offsets`` per partition (the next offset to consume)."""

    id: str
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    target: str = ""


def ack_name(request_id: str, tp: TopicPartition) -> str:
    """The acknowledgement node's name of ``tp`` for request ``request_id``.

    >>> ack_name("ab12", ("events", 3))
    'ab12:events:3'
    """
    return f"{request_id}:{tp[0]}:{tp[1]}"


def parse_ack_name(name: str) -> Optional[Tuple[str, TopicPartition]]:
    """``(request id, (topic, partition))`` of an acknowledgement's name; ``None`` for another name.

    >>> parse_ack_name("ab12:events:3")
    ('ab12', ('events', 3))
    """
    match = re.fullmatch(r"([0-9a-f]+):([^:/]+):([0-9]+)", name)
    return None if match is None else (match.group(1), (match.group(2), int(match.group(3))))


def encode_request(request: SeekRequest) -> bytes:
    offsets: Dict[str, Dict[str, int]] = {}
    for (topic, partition), offset in sorted(request.offsets.items()):
        offsets.setdefault(topic, {})[str(partition)] = offset
    return json.dumps({"version": 1, "id": request.id, "target": request.target, "offsets": offsets},
                      separators=(",", ":")).encode("utf-8")


def decode_request(path: str, data: bytes) -> SeekRequest:
    """The request stored at ``path``; :class:`MalformedZnodeError` for anything else."""
    try:
        doc = json.loads(data.decode("utf-8"))
        request_id = doc["id"]
        if not isinstance(request_id, str) or not re.fullmatch(r"[0-9a-f]+", request_id):
            raise ValueError(f"bad id {request_id!r}")
        offsets: Dict[TopicPartition, int] = {}
        for topic, partitions in doc["offsets"].items():
            for partition, offset in partitions.items():
                if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                    raise ValueError(f"bad offset {offset!r}")
                offsets[(str(topic), int(partition))] = offset
        return SeekRequest(request_id, offsets, str(doc.get("target", "")))
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise MalformedZnodeError(path, f"not a seek request: {exc}") from None


def encode_ack(consumer: str, offset: int) -> bytes:
    return json.dumps({"consumer": consumer, "offset": offset}, separators=(",", ":")).encode("utf-8")
