// SPDX-License-Identifier: MIT
// A tiny Node HTTP server for tests/bench/busynode.sh: answers every request
// with a short text body.
//
// Usage: node hello.js PORT   (prints "listening PORT")
'use strict';
const http = require('http');

const port = Number(process.argv[2]);
const body = Buffer.from('hello from node\n');
http.createServer((req, res) => {
  req.resume();
  res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': body.length });
  res.end(body);
}).listen(port, '127.0.0.1', () => console.log(`listening ${port}`));
