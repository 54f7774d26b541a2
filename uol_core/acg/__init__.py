"""ACG, the automatic code generator: constraint space, cost model, tuner and explanations."""
