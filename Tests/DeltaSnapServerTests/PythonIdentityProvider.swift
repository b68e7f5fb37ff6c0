import DeltaSnapTestSupport
import Foundation

/// Tests/Fixtures/jwks_provider.py, running: a key set on 127.0.0.1 and tokens minted by PyJWT.
/// Its Python environment (PyJWT, `cryptography`) is made under .build/ on first use, as
/// .ci/conformance.sh makes schemathesis's; when it cannot be made, the test fails: it never
/// skips silently.
final class PythonIdentityProvider: Sendable {
    let port: Int
    private let process: Spawned

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    var jwksURL: String { "http://127.0.0.1:\(port)/jwks.json" }

    /// The venv's python, made once per test process.
    private static let python: Result<String, RawHTTPClient.Failure> = {
        let venv = root.appendingPathComponent(".build/jwt-venv").path
        let python = venv + "/bin/python"
        if run(python, ["-c", "import jwt, cryptography"]) == 0 { return .success(python) }
        guard run("/usr/bin/env", ["python3", "-m", "venv", venv]) == 0,
              run(venv + "/bin/pip", ["install", "-q", "PyJWT>=2.8", "cryptography>=42"]) == 0,
              run(python, ["-c", "import jwt, cryptography"]) == 0
        else {
            return .failure(RawHTTPClient.Failure(description: "could not make \(venv) with PyJWT and cryptography from PyPI (python3-venv and network to PyPI needed)"))
        }
        return .success(python)
    }()

    private static func run(_ executable: String, _ arguments: [String]) -> Int32 {
        guard let child = try? Spawned(executable, arguments, stdout: .discard, stderr: .discard) else { return -1 }
        return child.wait()
    }

    static func start() async throws -> PythonIdentityProvider {
        try await offPool {
            let python = try Self.python.get()
            let process = try Spawned(python, [root.appendingPathComponent("Tests/Fixtures/jwks_provider.py").path], stdout: .pipe, stderr: .discard)
            // The first line: "port N".
            let text = process.readLines(untilEachOf: ["port "]).first ?? ""
            guard text.hasPrefix("port "), let port = Int(text.dropFirst(5).trimmingCharacters(in: .whitespacesAndNewlines)) else {
                process.stop()
                throw RawHTTPClient.Failure(description: "jwks_provider.py did not start: \(text)")
            }
            return PythonIdentityProvider(port: port, process: process)
        }
    }

    private init(port: Int, process: Spawned) {
        self.port = port
        self.process = process
    }

    @discardableResult
    func get(_ pathAndQuery: String) async throws -> String {
        let port = self.port
        let response = try await offPool { try RawHTTPClient(port: port).request("GET", pathAndQuery) }
        guard response.status == 200 else { throw RawHTTPClient.Failure(description: "\(pathAndQuery): \(response.status)") }
        return String(decoding: response.body, as: UTF8.self)
    }

    func mint(kid: String, claims: [String: Any], mode: String = "signed", alg: String? = nil) async throws -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let json = String(decoding: try JSONSerialization.data(withJSONObject: claims), as: UTF8.self)
        var query = "/mint?kid=\(kid)&mode=\(mode)&claims=\(json.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")"
        if let alg { query += "&alg=\(alg)" }
        return try await get(query)
    }

    func fetches() async throws -> Int {
        let stats = try await get("/stats")
        return (try JSONSerialization.jsonObject(with: Data(stats.utf8)) as? [String: Any])?["fetches"] as? Int ?? -1
    }

    func stop() {
        process.stop()
    }
}
