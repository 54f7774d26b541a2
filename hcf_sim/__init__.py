"""Communication framework (HCF): topologies, collectives, compression, overlap, faults."""
