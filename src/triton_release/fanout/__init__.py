"""A release spread over many runners (the composition: the shard plan is models/shards.py, the
candidate image registry/candidate/): `stage` builds and pushes a candidate once, each shard of
its models is golden-tested on a runner of its own (`test --image REPO@sha256:... --shard NAME`),
and `promote` tags the candidate once every shard's record passed."""
