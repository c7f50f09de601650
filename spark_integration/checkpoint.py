"""A streaming query's position from its checkpoint, as Spark's Kafka source takes it (``startingOffsets``).

The ``zkconsumer`` source checkpoints its offsets in the JSON form Spark's own
Kafka source writes (``{"topic":{"0":123,"1":456}}``), so moving a query to
Spark's source (brokers upgraded to a version it reads) needs only its
position: the end of the last micro-batch the query *completed*. That is the
offsets file of the newest batch that also has a commit file; a batch that was
planned but not committed is read again, as a restart of the query would::

    .venv/bin/python -m spark_integration.checkpoint /path/to/checkpoint
    {"events":{"0":123,"1":456}}

and ``spark.readStream.format("kafka").option("startingOffsets", <that>)``
goes on where the query stopped (in a new checkpoint: Spark's source applies
``startingOffsets`` only to a query without one). Checkpoints written before
the Spark form (``{"events/0":123}``) are converted. Local (or mounted)
checkpoint directories only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence

from zkconsumer.structs import TopicPartition

from .spark_json import read_source_offsets, source_offsets_json

__all__ = ["completed_batch", "checkpoint_offsets", "starting_offsets_json", "main"]


def _batch_ids(directory: str) -> List[int]:
    if not os.path.isdir(directory):
        return []
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def completed_batch(checkpoint: str) -> Optional[int]:
    """The id of the newest micro-batch with both an offsets and a commit file (``None``: none completed)."""
    planned = set(_batch_ids(os.path.join(checkpoint, "offsets")))
    done = [b for b in _batch_ids(os.path.join(checkpoint, "commits")) if b in planned]
    return done[-1] if done else None


def checkpoint_offsets(checkpoint: str, source: int = 0) -> Dict[TopicPartition, int]:
    """The end offsets of the last completed micro-batch of source number ``source`` (0: the first source).

    Raises ``ValueError`` if no batch completed yet, or the source has no offsets in it.
    """
    batch = completed_batch(checkpoint)
    if batch is None:
        raise ValueError(f"{checkpoint}: no micro-batch completed yet (no offsets/N with a commits/N): "
                         "the query has no position to hand over")
    path = os.path.join(checkpoint, "offsets", str(batch))
    with open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    # line 0: the format version (v1); line 1: the batch's metadata; then one line per source
    sources = lines[2:]
    if source >= len(sources) or sources[source].strip() in ("", "-"):
        raise ValueError(f"{path}: no offsets for source {source} ({len(sources)} source(s) in the query)")
    return read_source_offsets(json.loads(sources[source]))


def starting_offsets_json(checkpoint: str, source: int = 0) -> str:
    """:func:`checkpoint_offsets` as the JSON Spark's Kafka source takes as ``startingOffsets``."""
    return source_offsets_json(checkpoint_offsets(checkpoint, source))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_integration.checkpoint",
                                     description="Print a streaming query's position (its last completed "
                                                 "micro-batch) as startingOffsets JSON for Spark's Kafka source.")
    parser.add_argument("checkpoint", help="the query's checkpointLocation (a local directory)")
    parser.add_argument("--source", type=int, default=0, help="which source of the query (0: the first)")
    args = parser.parse_args(argv)
    try:
        print(starting_offsets_json(args.checkpoint, args.source))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
