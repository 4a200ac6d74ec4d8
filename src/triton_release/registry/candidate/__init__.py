"""The candidate: the staged image in the release repository, under `candidate-<sha12>`, and what
becomes of it.

- labels.py: the candidate as its labels describe it (`Candidate`, `read_candidate`), and its
  reference REPO@sha256:... (`parse_reference`);
- shard_results.py: the outcome of one shard's golden cases, kept beside the candidate
  (`ShardResult`, `write_shard_result`, `read_shard_result`);
- check.py: whether its shards' results let it become release X.Y.Z (`check_candidate`);
- promotion.py: the candidate's manifest put under X.Y.Z and the moving tags (`promote`);
- retention.py: the older candidates deleted after a promote (`retain_candidates`);
- stage.py: pushing and pulling it through the Docker daemon. It needs the Docker SDK, so it is
  imported by its own name (`registry.candidate.stage`), never from here.
"""

from triton_release.registry.candidate.check import CandidateCheck, check_candidate, problems, refusal, review
from triton_release.registry.candidate.labels import Candidate, parse_reference, read_candidate
from triton_release.registry.candidate.promotion import Promoted, promote
from triton_release.registry.candidate.retention import CandidateRetention, retain_candidates
from triton_release.registry.candidate.shard_results import ShardResult, read_shard_result, write_shard_result

__all__ = [
    "Candidate",
    "CandidateCheck",
    "CandidateRetention",
    "Promoted",
    "ShardResult",
    "check_candidate",
    "parse_reference",
    "problems",
    "promote",
    "read_candidate",
    "read_shard_result",
    "refusal",
    "retain_candidates",
    "review",
    "write_shard_result",
]
