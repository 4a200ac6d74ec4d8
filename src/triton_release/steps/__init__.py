"""The steps: one function each, returning a typed result. The single commands call them one by
one; `release` composes them. A step that refuses on its merits raises with its result attached,
so the console can still show what it found.

Modules that bring Docker, gRPC or pytest are imported inside the steps that need them, so that
`--version`, `validate` and `changed` start without them.

One module per domain, every name re-exported here (read as `steps.<name>`); imports run down:
- `changed`: validate, changes, bump and undo_bump, the bump's journal, recover, export, still_in_place.
- `image`: the environments (Prepared) and their changes since the last release, new_versions, build.
- `golden`: test with its drift and latency gates, sign, record; DEFAULT_SERVER.
- `publish`: push, published, tag, retain, finish_interrupted, commit, finish_commit, commit_shipped.
- `fanout`: stage and candidate tests (shards, candidates, shard results), and promote.
- `rollbacks`: rollback, rollback_model, verify_release.
- `evidence`: attach_evidence, finish_evidence, check_evidence, stage_evidence, promote_evidence.
"""

from triton_release.contract import CANDIDATE_TAG, MODELS_LABEL  # read as steps.CANDIDATE_TAG, steps.MODELS_LABEL
from triton_release.history.git import Git
from triton_release.steps.changed import (
    BumpResult,
    ChangesResult,
    Export,
    Recovered,
    VersionPlan,
    bump,
    changes,
    export,
    journal_end,
    journal_phase,
    journaled,
    recover,
    still_in_place,
    undo_bump,
    validate,
)
from triton_release.steps.evidence import (
    attach_evidence,
    check_evidence,
    finish_evidence,
    promote_evidence,
    stage_evidence,
)
from triton_release.steps.fanout import (
    RecordWritten,
    ShardPlan,
    check_candidate,
    find_candidate,
    plan_commit,
    plan_shards,
    promote,
    pull_candidate,
    push_candidate,
    retain_candidates,
    write_golden_record,
)
from triton_release.steps.golden import (
    DEFAULT_SERVER,
    Recorded,
    Signatures,
    _check_latency,
    _perf_analyzer,
    check_drift,
    record,
    signatures,
    test,
)
from triton_release.steps.image import (
    Prepared,
    ReleaseImage,
    build,
    environments,
    new_versions,
    released_before,
    unmeasurable_drift,
    with_environment_changes,
)
from triton_release.steps.publish import (
    Committed,
    as_recorded,
    commit,
    commit_shipped,
    finish_commit,
    finish_interrupted,
    log,
    published,
    push,
    retain,
    tag,
)
from triton_release.steps.rollbacks import rollback, rollback_model, verify_release

__all__ = [
    "CANDIDATE_TAG",
    "Git",
    # changed
    "BumpResult",
    "ChangesResult",
    "Export",
    "Recovered",
    "VersionPlan",
    "bump",
    "changes",
    "export",
    "journal_end",
    "journal_phase",
    "journaled",
    "recover",
    "still_in_place",
    "undo_bump",
    "validate",
    # image
    "MODELS_LABEL",
    "Prepared",
    "ReleaseImage",
    "build",
    "environments",
    "new_versions",
    "released_before",
    "unmeasurable_drift",
    "with_environment_changes",
    # golden (the private three are read by the unit tests)
    "DEFAULT_SERVER",
    "Recorded",
    "Signatures",
    "check_drift",
    "_check_latency",
    "_perf_analyzer",
    "record",
    "signatures",
    "test",
    # publish
    "Committed",
    "as_recorded",
    "commit",
    "commit_shipped",
    "finish_commit",
    "finish_interrupted",
    "log",
    "published",
    "push",
    "retain",
    "tag",
    # fanout
    "RecordWritten",
    "ShardPlan",
    "check_candidate",
    "find_candidate",
    "plan_commit",
    "plan_shards",
    "promote",
    "pull_candidate",
    "push_candidate",
    "retain_candidates",
    "write_golden_record",
    # rollbacks
    "rollback",
    "rollback_model",
    "verify_release",
    # evidence
    "attach_evidence",
    "check_evidence",
    "finish_evidence",
    "promote_evidence",
    "stage_evidence",
]
