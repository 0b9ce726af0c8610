"""After the push: canary rollout, live quality from delayed labels, and the decision to
promote or roll back (docs/rollout.md).

Above `serving/` (which loads versions and splits traffic by the labels written here) and
`governance/`, below the runner and the CLI:
  settings     the pipeline config's `rollout:` block
  sequential   the always-valid test the decision is made with (mixture SPRT)
  live_metrics the Evaluator's key metrics, streamed from (prediction, label) pairs
  feedback     the delayed-label files: format and validation
  join         request logs joined with feedback by request key, on disk (bounded memory)
  controller   one decision: join, measure, test, act (models.config, history, MLMD)
  simulate     replays a span's examples through a server and writes their feedback
"""
