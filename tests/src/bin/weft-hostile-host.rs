//! `weft-hostile-host`: what the hostile-host tests run inside a TAP host's
//! network namespace. It writes hand-made Ethernet frames straight onto the
//! host's interface through a packet socket (as a buggy or hostile program
//! with root in the host would): one of each kind the edge guard must
//! refuse (`weft_core::edge`), or a flood at the highest rate the kernel
//! takes, past the interface's qdisc, or (`--benign`) frames the guard lets
//! through (UDP, RoCEv2 WRITE Middle with its ICRC to QP 0x11 PSN 7, ARP).
//! Prints what it sent as JSON.
//!
//! ```text
//! weft-hostile-host --dev eth0 --mac 02:.. --ip 10.0.0.2 --gateway-mac 02:.. --peer 10.0.1.2 --repeat 10
//! weft-hostile-host ... --flood-secs 5 [--flood-kind valid|hostile]
//! ```

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use weft_testkit::{benign_host_frames, hostile_host_frames, udp, Entering, RealHostAddrs};
use weft_wire::{EthernetAddress, Ipv4Address};

#[derive(Parser)]
struct Args {
    /// Interface to write to.
    #[arg(long, default_value = "eth0")]
    dev: String,
    /// The host's own MAC.
    #[arg(long)]
    mac: String,
    /// The host's own address.
    #[arg(long)]
    ip: Ipv4Address,
    /// Its ToR port's MAC.
    #[arg(long)]
    gateway_mac: String,
    /// Another host's address (destination of the frames).
    #[arg(long)]
    peer: Ipv4Address,
    /// The access link's MTU.
    #[arg(long, default_value_t = 1500)]
    mtu: u16,
    /// How often to send each frame.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Send the benign frames instead of the hostile ones.
    #[arg(long)]
    benign: bool,
    /// Flood for this many seconds instead.
    #[arg(long)]
    flood_secs: Option<f64>,
    /// What the flood sends: `valid` UDP frames of the MTU to the peer, or
    /// the hostile frames in turn.
    #[arg(long, default_value = "valid")]
    flood_kind: String,
}

fn mac(s: &str) -> Result<EthernetAddress> {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16)).collect::<Result<_, _>>().with_context(|| format!("MAC `{s}`"))?;
    let Ok(a) = <[u8; 6]>::try_from(v) else { bail!("MAC `{s}` needs 6 octets") };
    Ok(EthernetAddress(a))
}

/// A raw packet socket bound to one interface.
struct PacketSocket(i32);

impl PacketSocket {
    fn open(dev: &str, bypass_qdisc: bool) -> Result<Self> {
        let name = std::ffi::CString::new(dev)?;
        // SAFETY: plain libc calls on values we own; results are checked.
        unsafe {
            let ifindex = libc::if_nametoindex(name.as_ptr());
            if ifindex == 0 {
                bail!("no interface {dev}");
            }
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
            if fd < 0 {
                bail!("packet socket: {}", std::io::Error::last_os_error());
            }
            let s = PacketSocket(fd);
            let mut sa: libc::sockaddr_ll = std::mem::zeroed();
            sa.sll_family = libc::AF_PACKET as u16;
            sa.sll_ifindex = ifindex as i32;
            let len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            if libc::bind(fd, &sa as *const _ as *const libc::sockaddr, len) != 0 {
                bail!("bind to {dev}: {}", std::io::Error::last_os_error());
            }
            if bypass_qdisc {
                let one: libc::c_int = 1;
                let l = std::mem::size_of::<libc::c_int>() as u32;
                libc::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one as *const _ as *const libc::c_void, l);
            }
            Ok(s)
        }
    }
    fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        // SAFETY: the buffer is valid for its length.
        let n = unsafe { libc::send(self.0, frame.as_ptr() as *const libc::c_void, frame.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

fn main() -> Result<()> {
    let a = Args::parse();
    let h = RealHostAddrs { mac: mac(&a.mac)?, ip: a.ip, gateway_mac: mac(&a.gateway_mac)?, peer: a.peer, mtu: a.mtu };
    let hostile: Vec<(String, bytes::BytesMut)> = if a.benign {
        benign_host_frames(&h).into_iter().map(|f| ("benign".to_string(), f)).collect()
    } else {
        hostile_host_frames(&h).into_iter().map(|(why, f)| (why.label().to_string(), f)).collect()
    };
    let mut sent: BTreeMap<String, u64> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    match a.flood_secs {
        None => {
            let s = PacketSocket::open(&a.dev, false)?;
            for _ in 0..a.repeat {
                for (why, f) in &hostile {
                    let k = why.clone();
                    match s.send(f) {
                        Ok(()) => *sent.entry(k).or_default() += 1,
                        Err(e) => *errors.entry(format!("{k}: {e}")).or_default() += 1,
                    }
                    // Paced, so that the interface's queue never drops one.
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        Some(secs) => {
            let s = PacketSocket::open(&a.dev, true)?;
            let valid =
                udp(Entering { dst_mac: h.gateway_mac, src_mac: h.mac, src: h.ip, dst: h.peer, dscp: 0 }, 40_001, 9, a.mtu as usize + 14);
            let frames: Vec<&[u8]> = match a.flood_kind.as_str() {
                "valid" => vec![&valid[..]],
                "hostile" => hostile.iter().map(|(_, f)| &f[..]).collect(),
                k => bail!("--flood-kind {k}: valid or hostile"),
            };
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let (mut ok, mut refused) = (0u64, 0u64);
            'flood: loop {
                for f in &frames {
                    match s.send(f) {
                        Ok(()) => ok += 1,
                        Err(_) => refused += 1,
                    }
                    if (ok + refused) % 256 == 0 && Instant::now() >= end {
                        break 'flood;
                    }
                }
            }
            sent.insert("flood".into(), ok);
            errors.insert("flood refused by the kernel".into(), refused);
        }
    }
    println!("{}", serde_json::json!({ "sent": sent, "errors": errors }));
    Ok(())
}
