//! Hosts: memory regions with their initial contents, RDMA objects (PDs, MRs, CQs, connected
//! QPs), DMA queues on each NIC's DMA engine, lookaside kernels; the operations that use them
//! (post send / receive, DMA, kernel) and the expectations that read them (memory, CQEs).
