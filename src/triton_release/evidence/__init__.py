"""Release evidence: what each release's digest carries to prove what was tested, how it was built
and what it holds (in-toto Statements in DSSE envelopes, stored as cosign stores attestations),
and the check of it (`verify`, `rollback` with a key)."""
