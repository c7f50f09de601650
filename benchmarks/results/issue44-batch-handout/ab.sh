#!/bin/bash
# alternating A/B of the batch path: before = c05a6fd (/tmp/wt-before), after = working tree
for i in 1 2 3; do
  for rate in 1000 10000; do
    for side in before after; do
      if [ $side = before ]; then dir=/tmp/wt-before; else dir=/work/main; fi
      (cd $dir && flock /tmp/zkconsumer-cluster.lock /work/main/.venv/bin/python -m benchmarks.cpu_split --rate $rate --window 15 batch) > /tmp/ab/$side-$rate-$i.txt 2>&1
    done
  done
done
echo finished
