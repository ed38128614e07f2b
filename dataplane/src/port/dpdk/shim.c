/* The C side of sprayswitch's DPDK binding (see mod.rs).
 *
 * DPDK's fast-path calls (rte_eth_rx_burst, rte_pktmbuf_alloc, the mbuf fields) are static
 * inline functions and macros: Rust cannot link against them, so this file wraps each in a
 * plain function. The rest of the binding goes through here too, so that the Rust side never
 * depends on the layout of a DPDK struct: everything crosses as integers, pointers to bytes
 * and the small structs declared here (mirrored in ffi.rs). Built by dataplane/build.rs with
 * the flags `pkg-config --cflags libdpdk` gives. */
#include <errno.h>
#include <string.h>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_ether.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

/* One received packet, as the Rust side takes it. */
struct ss_rx {
  struct rte_mbuf *m;
  uint8_t *data;     /* first byte of the frame */
  uint32_t len;      /* frame length (all segments) */
  uint32_t room;     /* bytes from `data` to the end of the first segment's buffer */
  uint16_t segs;     /* segments (1: the frame is `data[..len]`) */
};

/* What the Rust side needs of rte_eth_dev_info. */
struct ss_info {
  char driver[64];
  uint16_t max_rx_queues;
  uint16_t max_tx_queues;
  uint32_t max_rx_pktlen;
  uint16_t max_mtu;
};

struct ss_stats {
  uint64_t ipackets, opackets, imissed, ierrors, oerrors, rx_nombuf;
};

#define POOL_CACHE 256

/* 0, or why EAL did not start (some of its failures leave rte_errno at 0: EIO then). */
int ss_eal_init(int argc, char **argv) {
  if (rte_eal_init(argc, argv) >= 0)
    return 0;
  return rte_errno ? rte_errno : EIO;
}

/* Makes the calling thread (a worker, not started by EAL) an EAL thread with an lcore id of its
 * own, so that mempool caches serve it. 0 or a positive errno. */
int ss_thread_register(void) {
  if (rte_lcore_id() != LCORE_ID_ANY)
    return 0;
  return rte_thread_register() == 0 ? 0 : (rte_errno ? rte_errno : EIO);
}

/* The headroom DPDK was built with in front of each mbuf's data. */
uint32_t ss_headroom(void) { return RTE_PKTMBUF_HEADROOM; }

const char *ss_strerror(int e) { return rte_strerror(e); }

uint16_t ss_port_count(void) { return rte_eth_dev_count_avail(); }

/* The port `dev` names: an ethdev EAL has (a vdev's name, a PCI address), or a vdev's devargs
 * ("net_af_packet0,iface=eth0"), probed now when EAL does not have it yet (*probed is then 1:
 * the port's release removes the device again). */
int ss_port_by_name(const char *dev, uint16_t *port, int *probed) {
  char name[RTE_ETH_NAME_MAX_LEN];
  size_t n = strcspn(dev, ",");
  *probed = 0;
  if (n >= sizeof(name))
    return ENAMETOOLONG;
  memcpy(name, dev, n);
  name[n] = 0;
  if (rte_eth_dev_get_port_by_name(name, port) == 0)
    return 0;
  int rc = rte_dev_probe(dev);
  if (rc < 0)
    return -rc;
  if (rte_eth_dev_get_port_by_name(name, port) != 0)
    return ENODEV;
  *probed = 1;
  return 0;
}

int ss_port_info(uint16_t port, struct ss_info *out) {
  struct rte_eth_dev_info info;
  int rc = rte_eth_dev_info_get(port, &info);
  if (rc != 0)
    return -rc;
  memset(out, 0, sizeof(*out));
  if (info.driver_name)
    strncpy(out->driver, info.driver_name, sizeof(out->driver) - 1);
  out->max_rx_queues = info.max_rx_queues;
  out->max_tx_queues = info.max_tx_queues;
  out->max_rx_pktlen = info.max_rx_pktlen;
  out->max_mtu = info.max_mtu;
  return 0;
}

/* A pool of `n` mbufs of `data_room` bytes on the port's NUMA socket; NULL with a positive
 * errno in *err. */
struct rte_mempool *ss_pool_create(const char *name, uint32_t n, uint16_t data_room,
                                   uint16_t port, int *err) {
  int socket = rte_eth_dev_socket_id(port);
  struct rte_mempool *mp = rte_pktmbuf_pool_create(name, n, POOL_CACHE, 0, data_room,
                                                   socket < 0 ? SOCKET_ID_ANY : socket);
  *err = mp ? 0 : (rte_errno ? rte_errno : ENOMEM);
  return mp;
}

/* Frees a pool none of whose mbufs is out (a port that failed to start). */
void ss_pool_free(struct rte_mempool *mp) { rte_mempool_free(mp); }

/* Mbufs each EAL thread's cache of a pool may hold. */
uint32_t ss_pool_cache(void) { return POOL_CACHE; }

uint32_t ss_pool_avail(const struct rte_mempool *mp) { return rte_mempool_avail_count(mp); }

uint32_t ss_pool_in_use(const struct rte_mempool *mp) { return rte_mempool_in_use_count(mp); }

/* Configures `queues` receive and transmit queue pairs of `ring` descriptors, receiving into
 * `mp`, with the given MTU (set at configure time: the device takes it when it starts; no
 * rte_eth_dev_set_mtu, which on net_af_packet changes the kernel interface's MTU), and starts
 * the port. On failure returns a positive errno and sets *step to the call that failed (0 device
 * info, 1 configure, 3 rx queue, 4 tx queue, 5 start). *promisc is what enabling promiscuous
 * mode returned (0: on). */
/* `*ring`: the descriptors asked for per queue; on return, the most the device took for either
 * direction (rte_eth_dev_adjust_nb_rx_tx_desc fits them to its limits and alignment). */
int ss_port_start(uint16_t port, uint16_t queues, uint16_t *ring, struct rte_mempool *mp,
                  uint16_t mtu, int *step, int *promisc) {
  struct rte_eth_conf conf;
  memset(&conf, 0, sizeof(conf));
  conf.rxmode.mtu = mtu;
  int rc;
  if (queues > 1) {
    /* Spread flows over the receive queues by their addresses and ports. */
    struct rte_eth_dev_info info;
    *step = 0;
    if ((rc = rte_eth_dev_info_get(port, &info)) != 0)
      return -rc;
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf =
        info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP);
  }
  *step = 1;
  if ((rc = rte_eth_dev_configure(port, queues, queues, &conf)) != 0)
    return -rc;
  uint16_t rx = *ring, tx = *ring;
  *step = 2;
  if ((rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rx, &tx)) != 0)
    return -rc;
  *ring = rx > tx ? rx : tx;
  int socket = rte_eth_dev_socket_id(port);
  for (uint16_t q = 0; q < queues; q++) {
    *step = 3;
    if ((rc = rte_eth_rx_queue_setup(port, q, rx, socket, NULL, mp)) != 0)
      return -rc;
    *step = 4;
    if ((rc = rte_eth_tx_queue_setup(port, q, tx, socket, NULL)) != 0)
      return -rc;
  }
  *step = 5;
  if ((rc = rte_eth_dev_start(port)) != 0)
    return -rc;
  /* A switch port takes every frame on its wire, as an AF_XDP or AF_PACKET socket does. */
  *promisc = -rte_eth_promiscuous_enable(port);
  return 0;
}

/* Stops (when `started`) and closes the port; a device the switch probed itself (`remove`) is removed again,
 * so that the same devargs can be probed anew. */
void ss_port_close(uint16_t port, int started, int remove) {
  struct rte_eth_dev_info info;
  struct rte_device *dev = NULL;
  if (remove && rte_eth_dev_info_get(port, &info) == 0)
    dev = info.device;
  if (started)
    rte_eth_dev_stop(port);
  rte_eth_dev_close(port);
  if (dev)
    rte_dev_remove(dev);
}

void ss_mac(uint16_t port, uint8_t out[6]) {
  struct rte_ether_addr a;
  if (rte_eth_macaddr_get(port, &a) == 0)
    memcpy(out, a.addr_bytes, 6);
  else
    memset(out, 0, 6);
}

/* 1 up, 0 down, -1 unknown. */
int ss_link_up(uint16_t port) {
  struct rte_eth_link l;
  if (rte_eth_link_get_nowait(port, &l) != 0)
    return -1;
  return l.link_status == RTE_ETH_LINK_UP;
}

int ss_stats(uint16_t port, struct ss_stats *out) {
  struct rte_eth_stats s;
  int rc = rte_eth_stats_get(port, &s);
  if (rc != 0)
    return -rc;
  out->ipackets = s.ipackets;
  out->opackets = s.opackets;
  out->imissed = s.imissed;
  out->ierrors = s.ierrors;
  out->oerrors = s.oerrors;
  out->rx_nombuf = s.rx_nombuf;
  return 0;
}

/* Receives up to `n` packets from queue `q`. A VLAN tag the driver stripped goes back into
 * the frame (the switch reads tags from the frame); a packet that cannot take it back is
 * freed and counted in *lost. */
uint16_t ss_rx_burst(uint16_t port, uint16_t q, struct ss_rx *out, uint16_t n, uint64_t *lost) {
  struct rte_mbuf *m[64];
  if (n > 64)
    n = 64;
  uint16_t got = rte_eth_rx_burst(port, q, m, n), k = 0;
  for (uint16_t i = 0; i < got; i++) {
    struct rte_mbuf *b = m[i];
    if ((b->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) && rte_vlan_insert(&b) != 0) {
      rte_pktmbuf_free(b);
      (*lost)++;
      continue;
    }
    out[k].m = b;
    out[k].data = rte_pktmbuf_mtod(b, uint8_t *);
    out[k].len = b->pkt_len;
    out[k].room = b->buf_len - b->data_off;
    out[k].segs = b->nb_segs;
    k++;
  }
  return k;
}

/* Copies the whole of a multi-segment frame to `dst` (room for its length). */
void ss_mbuf_read(const struct rte_mbuf *m, uint8_t *dst) {
  const void *p = rte_pktmbuf_read(m, 0, m->pkt_len, dst);
  if (p != dst)
    memcpy(dst, p, m->pkt_len);
}

/* Transmits `n` packets on queue `q`; a single-segment packet's length becomes lens[i] first
 * (the switch may have rewritten it). Returns how many the driver took, from the front. */
uint16_t ss_tx_burst(uint16_t port, uint16_t q, struct rte_mbuf **m, const uint32_t *lens,
                     uint16_t n) {
  for (uint16_t i = 0; i < n; i++) {
    if (m[i]->nb_segs == 1) {
      m[i]->data_len = (uint16_t)lens[i];
      m[i]->pkt_len = lens[i];
    }
  }
  return rte_eth_tx_burst(port, q, m, n);
}

/* One mbuf of `mp` holding a copy of `src[..len]` (which fits its data room), with its data
 * pointer and room for the Rust side; NULL when the pool is empty. */
struct rte_mbuf *ss_mbuf_from(struct rte_mempool *mp, const uint8_t *src, uint32_t len,
                              uint8_t **data, uint32_t *room) {
  struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
  if (!m)
    return NULL;
  if (len > rte_pktmbuf_tailroom(m)) {
    rte_pktmbuf_free(m);
    return NULL;
  }
  memcpy(rte_pktmbuf_mtod(m, uint8_t *), src, len);
  m->data_len = (uint16_t)len;
  m->pkt_len = len;
  *data = rte_pktmbuf_mtod(m, uint8_t *);
  *room = m->buf_len - m->data_off;
  return m;
}

void ss_mbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
