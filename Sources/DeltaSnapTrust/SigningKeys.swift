import Crypto
import Foundation

/// An Ed25519 private key that signs indexes (`deltasnap keygen` writes one).
///
/// The file holds one line, `ed25519-private:` followed by the standard base64 of the
/// 32-byte private key (RFC 8032's seed).
///
/// ```swift
/// let key = IndexSigningKey.generate()
/// try key.write(toDirectory: "keys")          // keys/signing.key, keys/signing.pub
/// let again = try IndexSigningKey(contentsOf: "keys/signing.key")
/// ```
public struct IndexSigningKey: Sendable {
    static let prefix = "ed25519-private:"
    public static let privateFileName = "signing.key"
    public static let publicFileName = "signing.pub"

    let key: Curve25519.Signing.PrivateKey

    public static func generate() -> IndexSigningKey { IndexSigningKey(key: Curve25519.Signing.PrivateKey()) }

    init(key: Curve25519.Signing.PrivateKey) { self.key = key }

    public init(contentsOf path: String) throws(TrustError) {
        let raw = try KeyFile.read(path, prefix: Self.prefix, kind: "a DeltaSnap signing key (from `deltasnap keygen`)")
        do { key = try Curve25519.Signing.PrivateKey(rawRepresentation: raw) } catch {
            throw .keyFile(path: path, reason: "not an Ed25519 private key")
        }
    }

    public var publicKey: TrustedKey { TrustedKey(key: key.publicKey) }

    func signature(for message: [UInt8]) -> [UInt8] {
        // Signing an in-memory buffer cannot fail.
        Array(try! key.signature(for: message))
    }

    /// Writes `DIR/signing.key` (mode 0600) and `DIR/signing.pub`; refuses to overwrite.
    public func write(toDirectory directory: String) throws(TrustError) {
        let privatePath = (directory as NSString).appendingPathComponent(Self.privateFileName)
        let publicPath = (directory as NSString).appendingPathComponent(Self.publicFileName)
        for path in [privatePath, publicPath] where FileManager.default.fileExists(atPath: path) {
            throw .keyFile(path: path, reason: "already exists; move it away first (keys are never overwritten)")
        }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch { throw .keyFile(path: directory, reason: "cannot create the directory") }
        try KeyFile.write(privatePath, line: Self.prefix + key.rawRepresentation.base64EncodedString(), permissions: 0o600)
        try KeyFile.write(publicPath, line: TrustedKey.prefix + key.publicKey.rawRepresentation.base64EncodedString(), permissions: 0o644)
    }
}

/// An Ed25519 public key an app trusts to sign indexes; apps pin one or more.
///
/// The file holds one line, `ed25519-public:` followed by the standard base64 of the
/// 32-byte public key. Its ``id`` is the first 16 hex digits of the SHA-256 of those 32 bytes.
///
/// ```swift
/// let trusted = try TrustedKey(contentsOf: Bundle.main.path(forResource: "signing", ofType: "pub")!)
/// ```
public struct TrustedKey: Sendable, Equatable {
    static let prefix = "ed25519-public:"
    let key: Curve25519.Signing.PublicKey
    public let id: String

    init(key: Curve25519.Signing.PublicKey) {
        self.key = key
        id = Self.id(of: Array(key.rawRepresentation))
    }

    public init(contentsOf path: String) throws(TrustError) {
        let raw = try KeyFile.read(path, prefix: Self.prefix, kind: "a DeltaSnap public key (signing.pub)")
        try self.init(rawRepresentation: raw, source: path)
    }

    /// A key from its 32 raw bytes.
    public init(rawRepresentation raw: [UInt8], source: String = "key") throws(TrustError) {
        do { self.init(key: try Curve25519.Signing.PublicKey(rawRepresentation: raw)) } catch {
            throw .keyFile(path: source, reason: "not an Ed25519 public key")
        }
    }

    public var rawRepresentation: [UInt8] { Array(key.rawRepresentation) }

    func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        key.isValidSignature(signature, for: message)
    }

    static func id(of raw: [UInt8]) -> String { String(Hex.encode(SHA256.hash(data: raw)).prefix(16)) }

    public static func == (lhs: TrustedKey, rhs: TrustedKey) -> Bool { lhs.id == rhs.id && lhs.rawRepresentation == rhs.rawRepresentation }
}

/// The one-line key file format shared by both key kinds.
enum KeyFile {
    static func read(_ path: String, prefix: String, kind: String) throws(TrustError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else { throw .keyFile(path: path, reason: "cannot be read") }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix(prefix), let raw = Data(base64Encoded: String(text.dropFirst(prefix.count))), raw.count == 32 else {
            let other = prefix == TrustedKey.prefix ? IndexSigningKey.prefix : TrustedKey.prefix
            throw .keyFile(path: path, reason: text.hasPrefix(other) ? "is the other half of the key pair; expected \(kind)" : "is not \(kind)")
        }
        return Array(raw)
    }

    static func write(_ path: String, line: String, permissions: Int) throws(TrustError) {
        guard FileManager.default.createFile(atPath: path, contents: Data((line + "\n").utf8), attributes: [.posixPermissions: permissions]) else {
            throw .keyFile(path: path, reason: "cannot be written")
        }
    }
}
