"""pubmesh.trace: trace v1, the record of every run, written by both runtimes.

Package map:

* ``schema`` — trace v1: the one schema both runtimes write and the analysis reads.
* ``writer`` — TraceWriter: the buffered columnar writer (Parquet row groups) shared by the
  simulator and the TCP runtime.
"""
