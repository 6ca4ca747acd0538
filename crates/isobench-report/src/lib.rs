//! isobench-report
