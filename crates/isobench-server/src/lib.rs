//! isobench-server
