// What the supervisor's protobufjs gets for `require("long")` (without-long.ts): no Long class.
module.exports = null;
