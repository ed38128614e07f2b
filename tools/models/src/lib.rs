//! RNIC models: what a host's RDMA NIC does with the packets it receives and sends, following
//! the real transports' state machines. They are the oracles the switch is judged by (a reorder
//! engine is right when these models count no sequence error, implied NAK, duplicate or retry
//! when nothing was lost), and the hosts of every harness (`sprayswitch-harness`) and of the
//! traffic generator (`sprayswitch-packet`). They import the switch's wire layer only, never its
//! decisions.
//!
//! - [`rnic`]: simple ends: a Go-Back-N requester and responder (ConnectX-5 and Soft-RoCE
//!   behaviour on a sequence error) and a selective-repeat responder (ConnectX-6/7 in lossy
//!   mode), with their counters.
//! - [`rxe`]: Soft-RoCE's requester, completer and responder after the Linux driver
//!   (`drivers/infiniband/sw/rxe/`: `rxe_req.c`, `rxe_comp.c`, `rxe_resp.c`), on every RC verb.
//! - [`dcqcn`]: the DCQCN reaction point a sender's rate follows on CNPs.

pub mod dcqcn;
pub mod rnic;
pub mod rxe;
