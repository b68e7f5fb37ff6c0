import DeltaSnapCore

/// The `{"error": CODE, "message": TEXT}` body every DeltaSnap error answer carries
/// (docs/PROTOCOL.md §5): one reader for every path of the client that reports a refusal, so
/// what the server said reaches the app and the CLI (`over_capacity: … retry after 1 s`)
/// rather than a bare status.
///
/// ```swift
/// if let refusal = ServerErrorBody(bytes) { print("\(refusal.code): \(refusal.message)") }
/// ```
package struct ServerErrorBody: Sendable, Equatable, CustomStringConvertible {
    package var code: String
    /// The server's sentence; its code when it sent none.
    package var message: String

    /// Nil when `body` is not such an object (a proxy's HTML page, an empty body).
    package init?(_ body: [UInt8]) {
        guard let value = try? JSONReader(bytes: body).readValue(), case .string(let code)? = value["error"] else { return nil }
        self.code = code
        message = if case .string(let text)? = value["message"] { text } else { code }
    }

    package var description: String { code == message ? code : "\(code): \(message)" }
}
