"""After the push: canary rollout, live quality from delayed labels, and the decision to
promote or roll back (docs/rollout.md).

Above `serving/` (which loads versions and splits traffic by the labels written here) and
`governance/`, below the runner and the CLI:
  settings     the pipeline config's `rollout:` block
  sequential   the always-valid test the decision is made with (mixture SPRT)
  srm          the sample-ratio-mismatch check of the split
  maturity     which labelled requests are old enough to compare (current-status estimate)
  verdict      the decision rule around the test: the check, the wait, the test, the run-out
  live_metrics the Evaluator's key metrics, streamed from (prediction, label) pairs
  feedback     the delayed-label files: format and validation
  join         request logs joined with feedback by request key, on disk (bounded memory):
               split-routed, mature requests compared; the rest tallied apart
  controller   one decision: join, measure, judge, act (models.config, history, MLMD)
  simulate     replays a span's examples through a server and writes their feedback
  decision_sim a seeded in-memory rollout decided by `verdict` (the benchmark's and the
               known-answer tests')
"""
