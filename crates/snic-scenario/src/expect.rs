//! Checking expectations: counters (exact or ranges), captures (exact or with fields masked,
//! in order or not), buffers (contents, another buffer, SHA-256), CQE lists, end time; each
//! with a readable diff when it fails.
