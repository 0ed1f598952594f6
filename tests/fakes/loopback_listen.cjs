// Preloaded into Node servers the tests start (node --require ...): a listen() given only a port binds
// 127.0.0.1, never every interface (tests' servers listen on loopback only).
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if ((typeof args[0] === "number" || typeof args[0] === "string") && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
