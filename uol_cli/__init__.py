"""The `uol` command line: thin faces over the services in uol_core, hcf_sim and profilers."""
