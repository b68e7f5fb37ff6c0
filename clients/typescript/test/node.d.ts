// Debian ships no @types/node: node's own modules are untyped here, so that what `tsc -p test`
// checks is the tests' use of the package's entry points (deltasnap, deltasnap/protocol,
// deltasnap/internal) against their declarations.
declare module "node:*";
declare const Buffer: any;
declare const process: any;
