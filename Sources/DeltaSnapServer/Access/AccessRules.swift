import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Yams

/// Who may read and write each collection, and which collections are split into
/// partitions (`NAME/KEY`): what `serve --rules FILE` reads.
///
/// ```yaml
/// collections:
///   countries: { read: public, write: admin }
///   attempts:  { partitioned: true, read: owner,  write: owner }
///   sets:      { partitioned: true, read: member, write: member }
/// memberships: members   # members/<sub> holds {"id":"sets/8271","role":"write"} per partition
/// ```
///
/// A collection marked `review` is written by its editors (and the admin token) into a
/// workspace no reader sees; a reviewer publishes it (docs/PROTOCOL.md §13). Roles come from
/// the JWT's `roles` claim:
///
/// ```yaml
/// collections:
///   catalogue: { read: public, review: { editors: editor, reviewers: reviewer, self-approve: false } }
/// ```
///
/// ```swift
/// let rules = try AccessRules(yaml: String(contentsOfFile: "rules.yaml", encoding: .utf8))
/// rules["attempts"]?.read   // .owner
/// ```
///
/// Collections the file does not name keep the behaviour of ``AccessPolicy`` alone (public
/// to read unless private; JWT claims to write).
public struct AccessRules: Sendable, Equatable {
    /// Who a right is granted to.
    public enum Audience: String, Sendable, CaseIterable {
        /// Anyone, with or without a token.
        case `public`
        /// The admin token only.
        case admin
        /// A JWT whose `sub` equals the partition's KEY.
        case owner
        /// A JWT whose holder has a membership record for the partition (see ``memberships``).
        case member
        /// A JWT whose `read`/`write` claim names the collection (or the partition).
        case claims
    }

    /// The rule of one collection.
    public struct Rule: Sendable, Equatable {
        /// Whether the collection exists only as partitions `NAME/KEY`.
        public var partitioned: Bool
        public var read: Audience
        /// Who writes; in a reviewed collection, the editors write (its workspace) and this is `.admin`.
        public var write: Audience
        /// Review before publish: who edits and who reviews (nil: writes publish at once).
        public var review: ReviewSettings?

        public init(partitioned: Bool = false, read: Audience, write: Audience, review: ReviewSettings? = nil) {
            self.partitioned = partitioned
            self.read = read
            self.write = write
            self.review = review
        }
    }

    /// The review settings of every reviewed collection, by name.
    public var reviewed: [String: ReviewSettings] {
        collections.compactMapValues(\.review)
    }

    /// The rules by collection name.
    public var collections: [String: Rule]
    /// The partitioned collection whose partition `NAME/<sub>` lists the partitions user
    /// `sub` is a member of: one record per partition, `{"id":"sets/8271","role":"write"}`
    /// (`"read"` for read only). Written by the app's backend with the admin token; read by
    /// its owner. Nil: no memberships (a `member` rule then admits nobody).
    public var memberships: String?

    public init(collections: [String: Rule] = [:], memberships: String? = nil) {
        self.collections = collections
        self.memberships = memberships
        if let memberships, self.collections[memberships] == nil {
            // The user syncs their own memberships like any partition; only the backend writes them.
            self.collections[memberships] = Rule(partitioned: true, read: .owner, write: .admin)
        }
    }

    public subscript(collection: String) -> Rule? { collections[collection] }

    /// Whether any collection needs a token to be read.
    public var hasNonPublicReads: Bool { collections.values.contains { $0.read != .public } }

    /// Parses the YAML of a rules file; every problem is reported with where it is (the line
    /// and the key).
    ///
    /// Booleans are YAML 1.2's: `true` and `false`. YAML 1.1 also read `yes`, `no`, `on` and
    /// `off` as booleans, other YAML 1.2 tools read them as strings: `self-approve: yes` is
    /// refused rather than read one way here and another way by the tool that checks the file.
    public init(yaml: String) throws(AccessRulesError) {
        let root: Any?
        do {
            root = try Yams.load(yaml: yaml, Self.resolver)
        } catch {
            // Yams describes an error over several lines (the line, a caret under the place);
            // an error is one line: its first, which says where and what.
            let lines = String(describing: error).split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            throw .unreadable("not YAML: \(lines.first { !$0.isEmpty } ?? "unreadable")")
        }
        guard let document = root as? [String: Any] else { throw .unreadable("the file must be a mapping with \"collections\" (and \"memberships\")") }
        for key in document.keys where key != "collections" && key != "memberships" {
            throw .unreadable("unknown top-level key \"\(key)\": use \"collections\" and \"memberships\"")
        }
        var rules: [String: Rule] = [:]
        if let listed = document["collections"] {
            guard let mapping = listed as? [String: Any] else { throw .unreadable("\"collections\" must map collection names to rules") }
            let lines = KeyLines(yaml: yaml)
            for (name, value) in mapping {
                rules[name] = try Self.rule(named: name, value, lines: lines)
            }
        }
        var memberships: String?
        if let value = document["memberships"] {
            guard let name = value as? String, CollectionName.isValid(name) else {
                throw .unreadable("\"memberships\" must be a collection name")
            }
            if let rule = rules[name], !rule.partitioned {
                throw .unreadable("the memberships collection \"\(name)\" must be partitioned (one partition per user)")
            }
            memberships = name
        }
        self.init(collections: rules, memberships: memberships)
    }

    private static func rule(named name: String, _ value: Any, lines: KeyLines) throws(AccessRulesError) -> Rule {
        /// An error about `keys` of this rule, with the line they are on.
        func refusal(_ keys: [String], _ reason: String) -> AccessRulesError {
            .unreadable(lines.prefix(["collections", name] + keys) + reason)
        }
        guard CollectionName.isValid(name) else { throw refusal([], InvalidCollectionName(name: name).description) }
        guard let fields = value as? [String: Any] else { throw refusal([], "the rule of \"\(name)\" must be a mapping like { read: public, write: admin }") }
        for key in fields.keys where !["partitioned", "read", "write", "review"].contains(key) {
            throw refusal([key], "unknown key \"\(key)\" in the rule of \"\(name)\": use partitioned, read, write and review")
        }
        guard !ReviewPaths.isReserved(name) else {
            throw refusal([], "\"\(name)\" starts with \"\(ReviewPaths.reservedPrefix)\", which DeltaSnap keeps for review workspaces")
        }
        let review = try Self.review(named: name, fields["review"], refusal: refusal)
        var partitioned = false
        if let flag = fields["partitioned"] {
            guard let bool = flag as? Bool else { throw refusal(["partitioned"], "\"partitioned\" of \"\(name)\" must be true or false\(notABoolean(flag))") }
            partitioned = bool
        }
        func audience(_ key: String) throws(AccessRulesError) -> Audience {
            guard let text = fields[key] else { throw refusal([], "the rule of \"\(name)\" needs \"\(key)\"") }
            guard let word = text as? String, let audience = Audience(rawValue: word) else {
                throw refusal([key], "\"\(key)\" of \"\(name)\" must be one of \(Audience.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return audience
        }
        if review != nil, fields["write"] != nil {
            throw refusal(["write"], "\"\(name)\" is reviewed: its editors write (review: { editors: ROLE }), so it takes no \"write\"")
        }
        // A reviewed rule's `read` may be any audience: it says who reads what is published
        // (of each partition: its owner, its members, the claims naming it). The editors and
        // reviewers are the holders of their roles on every partition alike.
        let rule = Rule(partitioned: partitioned, read: try audience("read"), write: review == nil ? try audience("write") : .admin, review: review)
        if !partitioned && (rule.read == .owner || rule.read == .member || rule.write == .owner || rule.write == .member) {
            throw refusal([], "\"\(name)\" uses owner or member, which need a partition key: add \"partitioned: true\"")
        }
        return rule
    }

    /// YAML's default resolution with YAML 1.2's booleans only (`true`/`false`, any case
    /// YAML allows), so `yes`, `no`, `on` and `off` stay strings and are refused where a
    /// boolean belongs.
    static let resolver = Resolver.default.removing(.bool).appending(
        try! Resolver.Rule(.bool, "^(?:true|True|TRUE|false|False|FALSE)$"))

    /// What a value that should be a boolean is, for the error: `, not "yes"`.
    fileprivate static func notABoolean(_ value: Any) -> String {
        if let text = value as? String { return ", not \"\(text)\"" }
        return ""
    }
}

extension AccessRules {
    /// `review: { editors: ROLE, reviewers: ROLE, self-approve: BOOL }`, or nil when absent.
    ///
    /// `editors` and `reviewers` may name the same role: its holders review each other's
    /// requests (with `self-approve: false`, not their own).
    fileprivate static func review(
        named name: String, _ value: Any?, refusal: ([String], String) -> AccessRulesError
    ) throws(AccessRulesError) -> ReviewSettings? {
        guard let value else { return nil }
        guard let fields = value as? [String: Any] else {
            throw refusal(["review"], "\"review\" of \"\(name)\" must be a mapping like { editors: editor, reviewers: reviewer, self-approve: false }")
        }
        for key in fields.keys where !["editors", "reviewers", "self-approve"].contains(key) {
            throw refusal(["review", key], "unknown key \"\(key)\" in the review of \"\(name)\": use editors, reviewers and self-approve")
        }
        func role(_ key: String) throws(AccessRulesError) -> String {
            guard let role = fields[key] as? String, !role.isEmpty else {
                throw refusal(["review", key], "the review of \"\(name)\" needs \"\(key)\": one JWT role (in the \"roles\" claim) of its \(key)")
            }
            // A token's roles are matched exactly, and its string form splits at spaces: a
            // padded name would match no token, or only some.
            guard role.trimmingCharacters(in: .whitespaces) == role else {
                throw refusal(["review", key], "\"\(key)\" of \"\(name)\" is \"\(role)\": a role has no spaces around it")
            }
            return role
        }
        var selfApprove = false
        if let flag = fields["self-approve"] {
            guard let bool = flag as? Bool else {
                throw refusal(["review", "self-approve"], "\"self-approve\" of \"\(name)\" must be true or false\(notABoolean(flag))")
            }
            selfApprove = bool
        }
        return ReviewSettings(editors: try role("editors"), reviewers: try role("reviewers"), selfApprove: selfApprove)
    }
}

/// The line of each key of a rules file, for its errors: `line 3: …`.
struct KeyLines {
    private let root: Node?

    init(yaml: String) {
        root = try? Yams.compose(yaml: yaml, AccessRules.resolver)
    }

    /// `line N: ` for the deepest of `keys` the file has (nested mappings, from the top),
    /// or nothing.
    func prefix(_ keys: [String]) -> String {
        var node = root
        var line: Int?
        for key in keys {
            guard let next = node?.mapping?[key] else { break }
            node = next
            line = next.mark?.line
        }
        return line.map { "line \($0): " } ?? ""
    }
}

/// A rules file the server cannot use; reported at start-up as one line.
public enum AccessRulesError: Error, Equatable, CustomStringConvertible {
    case unreadable(String)

    public var description: String {
        switch self {
        case .unreadable(let reason): "the rules file is not usable: \(reason)"
        }
    }
}
