// SPDX-License-Identifier: MIT
// A tiny JDK HTTP server for tests/bench/busynode.sh: answers every request
// with a short text body, from a pool of THREADS handler threads.
//
// Usage: java Hello.java PORT [THREADS]   (source launch; prints "listening PORT")

import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;

public class Hello {
    public static void main(String[] args) throws Exception {
        // TCP_NODELAY: headers and body are two writes; with Nagle's
        // algorithm a keep-alive client waits for the delayed ACK (40 ms).
        System.setProperty("sun.net.httpserver.nodelay", "true");
        int port = Integer.parseInt(args[0]);
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 4;
        byte[] body = "hello from the JDK\n".getBytes(StandardCharsets.US_ASCII);
        HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 256);
        server.createContext("/", exchange -> {
            exchange.getRequestBody().readAllBytes();
            exchange.getResponseHeaders().set("Content-Type", "text/plain");
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.setExecutor(Executors.newFixedThreadPool(threads));
        server.start();
        System.out.println("listening " + port);
    }
}
