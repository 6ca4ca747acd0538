//! isobench-loadgen
