"""Flickr30k Entities' Sentences and Annotations files: read, written, and read back unchanged."""

from __future__ import annotations

import pytest

from crisscross.entities.files import (
    AnnotatedObject,
    Annotation,
    Phrase,
    SentenceError,
    format_sentence,
    linked_away,
    parse_sentence,
    read_annotation,
    release_ids,
    sentences_file,
    write_annotation,
    write_sentences,
)

# Lines in the release's layout (the public repository's README shows the same shape).
SENTENCES = (
    "[/EN#1/people Two young guys] with [/EN#2/bodyparts shaggy hair] look at [/EN#3/bodyparts their hands] "
    "while hanging out in [/EN#8/scene the yard] .\n"
    "[/EN#1/people Two young , White males] are outside near [/EN#4/scene many bushes] .\n"
    "[/EN#6729/vehicles/scene the subway] stops at [/EN#0/notvisual night] .\n"
)
ANNOTATION = (
    "<annotation>\n\t<filename>1000092795.jpg</filename>\n\t<size>\n\t\t<width>333</width>\n\t\t<height>500</height>\n"
    "\t\t<depth>3</depth>\n\t</size>\n"
    "\t<object>\n\t\t<name>1</name>\n\t\t<name>6</name>\n\t\t<bndbox>\n\t\t\t<xmin>197</xmin>\n\t\t\t<ymin>110</ymin>\n"
    "\t\t\t<xmax>261</xmax>\n\t\t\t<ymax>373</ymax>\n\t\t</bndbox>\n\t</object>\n"
    "\t<object>\n\t\t<name>1</name>\n\t\t<bndbox>\n\t\t\t<xmin>1</xmin>\n\t\t\t<ymin>1</ymin>\n"
    "\t\t\t<xmax>333</xmax>\n\t\t\t<ymax>500</ymax>\n\t\t</bndbox>\n\t</object>\n"
    "\t<object>\n\t\t<name>8</name>\n\t\t<scene>1</scene>\n\t\t<nobndbox>0</nobndbox>\n\t</object>\n"
    "\t<object>\n\t\t<name>10</name>\n\t\t<scene>0</scene>\n\t\t<nobndbox>1</nobndbox>\n\t</object>\n"
    "</annotation>\n"
)


def test_a_sentences_file_is_read_with_chains_and_types_and_written_back_byte_for_byte():
    captions, mentions = sentences_file("rel/Sentences/1000092795.txt", SENTENCES)
    assert [c.caption_id for c in captions] == ["f30k:cap:1000092795#0", "f30k:cap:1000092795#1", "f30k:cap:1000092795#2"]
    assert captions[1].text == "Two young , White males are outside near many bushes ."
    assert [(m.text, m.given_chain, m.types, m.first, m.end) for m in mentions[:2]] == [
        ("Two young guys", "1", "people", 0, 3),
        ("shaggy hair", "2", "bodyparts", 4, 6),
    ]
    assert mentions[-2].types == "vehicles/scene" and mentions[-2].kind == "vehicles" and mentions[-1].types == "notvisual"
    lines = []
    for caption in captions:
        own = [m for m in mentions if m.caption_id == caption.caption_id]
        lines.append((caption.text.split(), [Phrase(m.first, m.end, m.given_chain, m.types) for m in own]))
    assert write_sentences(lines).decode() == SENTENCES


def test_a_line_whose_brackets_do_not_parse_names_file_and_line():
    with pytest.raises(SentenceError, match=r"S/1\.txt:2: mention \[/EN#3 … is not closed"):
        sentences_file("S/1.txt", "[/EN#1/people A man] .\n[/EN#3/other a hat .\n")
    with pytest.raises(SentenceError, match="malformed mention opening"):
        parse_sentence("[/EN#/people A man] .", "S/1.txt:1")


def test_an_unknown_type_in_a_release_is_quarantined_not_kept():
    _, mentions = sentences_file("S/1.txt", "[/EN#1/robots A robot] .\n")
    assert mentions[0].reason == "unknown-type"


def test_annotations_are_read_zero_based_and_written_back_byte_for_byte():
    annotation = read_annotation(ANNOTATION.encode(), "A/1000092795.xml")
    assert (annotation.width, annotation.height, annotation.depth) == (333, 500, 3)
    assert annotation.boxes() == {"1": [(196, 109, 260, 372), (0, 0, 332, 499)], "6": [(196, 109, 260, 372)]}
    assert annotation.objects[2] == AnnotatedObject(("8",), None, scene=True, nobox=False)
    assert annotation.objects[3] == AnnotatedObject(("10",), None, scene=False, nobox=True)
    assert write_annotation(annotation).decode() == ANNOTATION
    made = Annotation("x.jpg", 10, 20, 3, (AnnotatedObject(("2", "5"), (0, 1, 9, 19)), AnnotatedObject(("a&b<c",), None, nobox=True)))
    assert read_annotation(write_annotation(made), "x") == made  # chain ids are escaped


def test_a_broken_annotation_is_an_input_error_naming_the_file():
    with pytest.raises(ValueError, match="A/1.xml: not XML"):
        read_annotation(b"<annotation>", "A/1.xml")
    with pytest.raises(ValueError, match="A/1.xml: <bndbox> has no <ymax>"):
        read_annotation(
            b"<annotation><size><width>3</width><height>3</height></size><object><name>1</name><bndbox><xmin>1</xmin>"
            b"<ymin>1</ymin><xmax>2</xmax></bndbox></object></annotation>",
            "A/1.xml",
        )


def test_an_annotation_with_a_dtd_or_a_path_for_a_file_name_is_refused():
    bomb = b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xxxxxxxx"><!ENTITY y "&x;&x;&x;&x;">]><annotation>&y;</annotation>'
    with pytest.raises(ValueError, match="A/1.xml: refused: DTDForbidden"):
        read_annotation(bomb, "A/1.xml")
    external = b'<!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/passwd">]><annotation><filename>&e;</filename></annotation>'
    with pytest.raises(ValueError, match="A/1.xml: refused"):
        read_annotation(external, "A/1.xml")
    escaping = ANNOTATION.replace("1000092795.jpg", "../../etc/1000092795.jpg").encode()
    with pytest.raises(ValueError, match=r"A/1.xml: <filename> '../../etc/1000092795.jpg' is not a plain file name"):
        read_annotation(escaping, "A/1.xml")


def test_a_release_file_linked_out_of_its_folder_is_found(tmp_path):
    (tmp_path / "Sentences").mkdir()
    (tmp_path / "secret.txt").write_text("x")
    (tmp_path / "Sentences" / "1.txt").write_text(SENTENCES)
    (tmp_path / "Sentences" / "2.txt").symlink_to(tmp_path / "secret.txt")
    assert linked_away(str(tmp_path / "Sentences" / "1.txt")) is None
    assert linked_away(str(tmp_path / "Sentences" / "2.txt")) == str(tmp_path / "secret.txt")
    assert linked_away("gs://bucket/Sentences/1.txt") is None


def test_release_ids_are_flickr_ids_for_photo_numbers_and_plain_otherwise():
    assert release_ids("1000092795", 1) == ("f30k:img:1000092795", ["f30k:cap:1000092795#0"])
    assert release_ids("COCO_val2014_000000010707", 2)[1] == [
        "entities:cap:COCO_val2014_000000010707#0",
        "entities:cap:COCO_val2014_000000010707#1",
    ]
    assert format_sentence(["A", "dog", "."], [Phrase(0, 2, "3", "animals")]) == "[/EN#3/animals A dog] ."
