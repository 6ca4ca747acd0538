//! isobench-mock
