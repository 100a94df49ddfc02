// Preloaded into fauxqs with NODE_OPTIONS="--import <this file>" by servers.sh.
//
// fauxqs 1.9.2 calls app.listen({ port, host: "0.0.0.0" }) with the host
// hard-coded, so FAUXQS_HOST cannot keep it off the network. This preload
// rewrites every TCP listen in the process that targets a wildcard (or no)
// address to 127.0.0.1, so the emulator is reachable on loopback only.
// Unix-socket paths and inherited handles are left alone.
import net from "node:net";

const LOOPBACK = process.env.ONCEQ_LISTEN_HOST || "127.0.0.1";
const WILDCARD = new Set([undefined, null, "", "0.0.0.0", "::", "[::]", "::0"]);

const origListen = net.Server.prototype.listen;

net.Server.prototype.listen = function patchedListen(...args) {
  const first = args[0];
  if (first !== null && typeof first === "object" && !Array.isArray(first)) {
    // listen(options[, cb]) — options may be {port, host}, {path} or {handle}/{fd}.
    const isTCP = first.path === undefined && first.handle === undefined &&
      first.fd === undefined && first._handle === undefined;
    if (isTCP && WILDCARD.has(first.host)) {
      args[0] = { ...first, host: LOOPBACK, ipv6Only: false };
    }
  } else if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    // listen(port[, host][, backlog][, cb])
    const second = args[1];
    if (typeof second === "string" || second === undefined || second === null) {
      if (WILDCARD.has(second)) args[1] = LOOPBACK;
    } else {
      // listen(port, backlog?, cb?) or listen(port, cb): insert the host.
      args.splice(1, 0, LOOPBACK);
    }
  }
  return origListen.apply(this, args);
};
