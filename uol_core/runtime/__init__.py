"""Running operators: concrete shapes and the reference evaluator (more runners join here)."""
