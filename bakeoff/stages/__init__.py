"""The bake-off's stages: eliminate, comparable, measure, production (bakeoff/run.py
runs them in that order). Each judges one candidate through its gateway and returns a
`bakeoff.verdict.StageResult`."""
