"""The decoder against the shared test vectors (wit/abi-vectors.json): every one must read as
its `expect` says. Run: python3 -m unittest discover -s plugin-sdk/python/tests"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from wisp_plugin import abi  # noqa: E402
from wisp_plugin.settings import parse_settings  # noqa: E402

VECTORS = os.path.join(HERE, "..", "..", "..", "wit", "abi-vectors.json")


def vectors():
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)


def read(o):
    """What a decoder reads from an object, in the vectors' form."""
    return {
        "apiVersion": o.api_version, "kind": o.kind, "namespace": o.namespace,
        "name": o.name, "uid": o.uid, "resourceVersion": o.resource_version,
        "generation": o.generation, "deletionTimestamp": o.deletion_timestamp,
        "labels": [list(p) for p in o.labels], "annotations": [list(p) for p in o.annotations],
        "ownerReferences": [
            {"apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid,
             "controller": r.controller, "blockOwnerDeletion": r.block_owner_deletion}
            for r in o.owner_refs
        ],
        "json": o.json.decode("utf-8", "replace") if o.json else None,
    }


class Vectors(unittest.TestCase):
    def test_objects_read_as_the_vectors_say(self):
        v = vectors()
        self.assertEqual(v["layoutVersion"], abi.LAYOUT_VERSION)
        self.assertGreaterEqual(len(v["objects"]), 4)
        for case in v["objects"]:
            o = abi.Object(bytes.fromhex(case["hex"]))
            self.assertEqual(read(o), case["expect"], case["name"])
            for k, val in o.labels:
                self.assertEqual(o.label(k), val)
            self.assertIsNone(o.label("no-such-label"))

    def test_batches_read_as_the_vectors_say(self):
        cases = vectors()["batches"]
        self.assertGreaterEqual(len(cases), 3)
        for case in cases:
            b = abi.Batch(bytes.fromhex(case["hex"]))
            want = case["expect"]
            self.assertEqual(b.informer, want["informer"], case["name"])
            got = []
            for n in b:
                self.assertNotIsInstance(n, abi.DecodeError, case["name"])
                got.append({
                    "seq": n.seq, "kind": n.kind, "initialList": n.initial_list,
                    "resync": n.resync, "finalStateUnknown": n.final_state_unknown,
                    "object": read(n.object), "old": read(n.old) if n.old else None,
                })
            self.assertEqual(got, want["notifications"], case["name"])

    def test_lists_read_as_the_vectors_say(self):
        for case in vectors()["lists"]:
            got = [read(o) for o in abi.decode_list(bytes.fromhex(case["hex"]))]
            self.assertEqual(got, case["expect"], case["name"])

    def test_bytes_cut_anywhere_are_an_error_never_another_exception(self):
        v = vectors()
        obj = bytes.fromhex(v["objects"][0]["hex"])
        for cut in range(len(obj)):
            with self.assertRaises(abi.DecodeError, msg=f"cut at {cut}"):
                abi.Object(obj[:cut])
        batch = bytes.fromhex(v["batches"][0]["hex"])
        for cut in range(len(batch)):
            try:
                b = abi.Batch(batch[:cut])
            except abi.DecodeError:
                continue
            for n in b:
                if not isinstance(n, abi.DecodeError):
                    read(n.object)
        flipped = bytearray(obj)
        for i in range(min(len(flipped), 400)):
            flipped[i] ^= 0xFF
            try:
                read(abi.Object(flipped))
            except abi.DecodeError:
                pass
            flipped[i] ^= 0xFF
        with self.assertRaises(abi.DecodeError):
            abi.Object(bytes([2, 0, 0, 0]))

    def test_a_metadata_only_object_says_why_it_cannot_be_parsed(self):
        case = next(c for c in vectors()["batches"] if c["name"].startswith("metadata only"))
        n = abi.Batch(bytes.fromhex(case["hex"])).get(0)
        self.assertFalse(n.object.has_json)
        self.assertEqual(n.object.label("app"), "web")
        with self.assertRaises(ValueError) as e:
            n.object.value()
        self.assertIn("metadata-only", str(e.exception))

    def test_owner_flags_are_read_bit_by_bit(self):
        # The vectors set controller and blockOwnerDeletion together: flip them apart.
        b = bytearray(bytes.fromhex(vectors()["objects"][0]["hex"]))
        base = int.from_bytes(b[4 + 10 * 8:4 + 10 * 8 + 4], "little")
        flags = base + 8 + 32  # the first owner's flags
        for value, want in [(1, (True, False)), (2, (False, True)), (0, (False, False))]:
            b[flags:flags + 4] = value.to_bytes(4, "little")
            o = abi.Object(b).owner_refs[0]
            self.assertEqual((o.controller, o.block_owner_deletion), want, value)

    def test_the_json_parses_on_demand(self):
        o = abi.Object(bytes.fromhex(vectors()["objects"][0]["hex"]))
        self.assertEqual(o.value()["spec"]["containers"][0]["image"], "nginx:1.27")
        self.assertEqual(o.key, "shop/web-0")


class Settings(unittest.TestCase):
    FIELDS = {"denyLatest": (bool, True), "exemptNamespaces": ([str], [])}

    def test_defaults_fill_what_is_missing(self):
        self.assertEqual(parse_settings("{}", self.FIELDS),
                         {"denyLatest": True, "exemptNamespaces": []})

    def test_text_that_is_not_utf8_is_refused_naming_its_field(self):
        cases = vectors()["refused"]
        self.assertGreaterEqual(len(cases), 2)
        for case in cases:
            with self.assertRaises(abi.DecodeError, msg=case["name"]) as e:
                abi.Object(bytes.fromhex(case["hex"]))
            self.assertIn(case["field"], str(e.exception), case["name"])
            self.assertIn("not UTF-8", str(e.exception), case["name"])

    def test_errors_name_the_field(self):
        for text, start in [
            ('{"denyLatest": "yes"}', "settings.denyLatest: invalid type: string \"yes\", "
                                      "expected a boolean"),
            ('{"denyLatest": true, "x": 1}', "settings: unknown field `x`"),
            ('{"exemptNamespaces": ["a", 1]}', "settings.exemptNamespaces[1]: invalid type"),
            ('[]', "settings: invalid type: sequence"),
            ('{', "settings: "),
        ]:
            with self.assertRaises(ValueError) as e:
                parse_settings(text, self.FIELDS)
            self.assertTrue(str(e.exception).startswith(start), str(e.exception))


if __name__ == "__main__":
    unittest.main()
