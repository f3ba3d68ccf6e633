//! RoCEv2
