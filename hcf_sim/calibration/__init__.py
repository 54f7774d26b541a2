"""The model against measurements: alpha-beta from local gloo runs, nccl-tests logs (reader, fit, validation) and published clusters' logs."""
