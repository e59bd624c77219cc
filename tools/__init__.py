"""What the course's developers run and instructors need not: the demo class, the benchmarks, the
synthetic hand-ins built from a catalogue, and a Dask cluster on loopback. Nothing here is imported by the
``attention_course`` package (students' kernels import only that package)."""
