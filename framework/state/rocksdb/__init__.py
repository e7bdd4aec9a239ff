"""RocksDB store backend (the only package that imports rocksdict)."""

from framework.state.rocksdb.backend import RocksDBBackend, RocksDBPartition

__all__ = ["RocksDBBackend", "RocksDBPartition"]
