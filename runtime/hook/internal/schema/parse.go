// Package schema reads runtime/hook's event schema from its source and
// generates the files derived from it: the binary body layouts
// (binary_gen.go), the JSON-lines fast path's body decoders
// (jsonfast_gen.go), the per-field value rules (validate_gen.go) and the
// layout and value tables of WIRE.md.
//
// The schema is the body structs of event.go as the compiler sees them —
// field names, Go types, `json` tags — plus what a tag of Go cannot say,
// written beside each struct:
//
//	//hook:binary f1 f2 |label f3   binary layout: JSON names in wire order;
//	                                "|" opens a group appended later (read only
//	                                when bytes are left), "label" names it
//	//hook:fastjson [slab]          the JSON-lines fast path decodes this kind
//	                                (slab: bodies come from the decoder's slabs)
//	//hook:values TEXT              cross-field rules, checked by the
//	                                hand-written validateMore method; TEXT is
//	                                their WIRE.md wording
//	`check:"min=0"`                 field rules: min=N, oneof=a|b (an empty
//	`check:"oneof=|a|b"`            first entry allows ""), maxlen=CONST
//	`jsonalias:"error"`             an older JSON name the fast path also takes
//
// It reads source with go/ast rather than importing runtime/hook, so it runs
// while the generated files are stale or missing. Errors name the struct and
// field at fault.
package schema

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Schema is the parsed event model.
type Schema struct {
	Kinds   []*Kind            // numeric order
	Structs map[string]*Struct // every struct type of event.go
	named   map[string]ast.Expr
	consts  map[string]string // constant name -> literal value (unquoted)
}

// Kind is one event kind.
type Kind struct {
	Num   int
	Name  string // "room.checksum"
	Const string // "KindRoomChecksum"
	Body  *Struct
}

// Struct is one struct type with its directives.
type Struct struct {
	Name     string
	Fields   []*Field
	Binary   []*Field // wire order; nil: no binary layout
	Groups   []string // label of each appended group, by the index in Binary where it starts
	GroupAt  []int
	FastJSON bool
	Slab     bool
	Values   string // hook:values text
}

// Field is one struct field.
type Field struct {
	Go        string
	JSON      string
	OmitEmpty bool
	Type      ast.Expr
	Alias     string
	Checks    []Check
}

// Check is one field rule.
type Check struct {
	Op  string // min, oneof, maxlen
	Arg string
}

// Parse reads event.go in dir.
func Parse(dir string) (*Schema, error) {
	fset := token.NewFileSet()
	path := filepath.Join(dir, "event.go")
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	s := &Schema{Structs: map[string]*Struct{}, named: map[string]ast.Expr{}, consts: map[string]string{}}
	kindNum := map[string]int{}
	kindName := map[string]string{}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch sp := spec.(type) {
				case *ast.TypeSpec:
					doc := sp.Doc
					if doc == nil {
						doc = d.Doc
					}
					if st, ok := sp.Type.(*ast.StructType); ok {
						str, err := parseStruct(sp.Name.Name, st, doc)
						if err != nil {
							return nil, err
						}
						s.Structs[str.Name] = str
					} else {
						s.named[sp.Name.Name] = sp.Type
					}
				case *ast.ValueSpec:
					for i, n := range sp.Names {
						if i < len(sp.Values) {
							if lit, ok := sp.Values[i].(*ast.BasicLit); ok {
								v := lit.Value
								if lit.Kind == token.STRING {
									v, _ = strconv.Unquote(v)
								}
								s.consts[n.Name] = v
								if id, ok := sp.Type.(*ast.Ident); ok && id.Name == "Kind" && lit.Kind == token.INT {
									kindNum[n.Name], _ = strconv.Atoi(lit.Value)
								}
							}
							if n.Name == "kindNames" {
								cl, ok := sp.Values[i].(*ast.CompositeLit)
								if !ok {
									return nil, fmt.Errorf("parse schema: kindNames is not a composite literal")
								}
								for _, e := range cl.Elts {
									kv := e.(*ast.KeyValueExpr)
									name, _ := strconv.Unquote(kv.Value.(*ast.BasicLit).Value)
									kindName[kv.Key.(*ast.Ident).Name] = name
								}
							}
						}
					}
				}
			}
		case *ast.FuncDecl:
			// func (*RunStart) Kind() Kind { return KindRunStart }
			if d.Recv == nil || d.Name.Name != "Kind" || len(d.Recv.List) != 1 || d.Body == nil || len(d.Body.List) != 1 {
				continue
			}
			star, ok := d.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			ret, ok := d.Body.List[0].(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				continue
			}
			c, ok := ret.Results[0].(*ast.Ident)
			if !ok {
				continue
			}
			s.Kinds = append(s.Kinds, &Kind{Const: c.Name, Body: &Struct{Name: star.X.(*ast.Ident).Name}})
		}
	}
	for _, k := range s.Kinds {
		body, ok := s.Structs[k.Body.Name]
		if !ok {
			return nil, fmt.Errorf("parse schema: %s's Kind method returns %s but no struct %s is declared in event.go", k.Body.Name, k.Const, k.Body.Name)
		}
		k.Body = body
		n, ok := kindNum[k.Const]
		if !ok {
			return nil, fmt.Errorf("parse schema: kind constant %s has no numeric value", k.Const)
		}
		k.Num, k.Name = n, kindName[k.Const]
		if k.Name == "" {
			return nil, fmt.Errorf("parse schema: kind %s has no name in kindNames", k.Const)
		}
	}
	sort.Slice(s.Kinds, func(i, j int) bool { return s.Kinds[i].Num < s.Kinds[j].Num })
	return s, s.check()
}

func parseStruct(name string, st *ast.StructType, doc *ast.CommentGroup) (*Struct, error) {
	str := &Struct{Name: name}
	for _, fl := range st.Fields.List {
		if len(fl.Names) == 0 {
			return nil, fmt.Errorf("parse schema: %s embeds a field; the schema wants named fields", name)
		}
		var tag reflect.StructTag
		if fl.Tag != nil {
			t, _ := strconv.Unquote(fl.Tag.Value)
			tag = reflect.StructTag(t)
		}
		for _, n := range fl.Names {
			if !n.IsExported() {
				continue
			}
			f := &Field{Go: n.Name, Type: fl.Type, Alias: tag.Get("jsonalias")}
			var opts string
			f.JSON, opts, _ = strings.Cut(tag.Get("json"), ",")
			f.OmitEmpty = strings.Contains(","+opts+",", ",omitempty,")
			if f.JSON == "" {
				f.JSON = n.Name
			}
			if c := tag.Get("check"); c != "" {
				for _, part := range strings.Split(c, ";") {
					op, arg, ok := strings.Cut(part, "=")
					if !ok || (op != "min" && op != "oneof" && op != "maxlen") {
						return nil, fmt.Errorf("parse schema: %s.%s: check %q: want min=N, oneof=a|b or maxlen=CONST", name, n.Name, part)
					}
					f.Checks = append(f.Checks, Check{op, arg})
				}
			}
			str.Fields = append(str.Fields, f)
		}
	}
	if doc == nil {
		return str, nil
	}
	for _, c := range doc.List {
		text, ok := strings.CutPrefix(c.Text, "//hook:")
		if !ok {
			continue
		}
		verb, arg, _ := strings.Cut(text, " ")
		switch verb {
		case "binary":
			for _, tok := range strings.Fields(arg) {
				if l, ok := strings.CutPrefix(tok, "|"); ok {
					str.GroupAt = append(str.GroupAt, len(str.Binary))
					str.Groups = append(str.Groups, strings.ReplaceAll(l, "-", " "))
					continue
				}
				f := str.field(tok)
				if f == nil {
					return nil, fmt.Errorf("parse schema: %s: //hook:binary names %q, which is not a JSON name of its fields", name, tok)
				}
				str.Binary = append(str.Binary, f)
			}
			if len(str.Binary) != len(str.Fields) {
				var missing []string
				for _, f := range str.Fields {
					if !slicesContains(str.Binary, f) {
						missing = append(missing, f.JSON)
					}
				}
				return nil, fmt.Errorf("parse schema: %s: //hook:binary lists %d fields, the struct has %d (missing %v, or one listed twice): "+
					"append a new field's JSON name to the end of the line, after \"|\" so older producers' frames still decode",
					name, len(str.Binary), len(str.Fields), missing)
			}
		case "fastjson":
			str.FastJSON = true
			str.Slab = strings.TrimSpace(arg) == "slab"
		case "values":
			str.Values = strings.TrimSpace(arg)
		default:
			return nil, fmt.Errorf("parse schema: %s: unknown directive //hook:%s", name, verb)
		}
	}
	return str, nil
}

func slicesContains(fs []*Field, f *Field) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}

func (s *Struct) field(json string) *Field {
	for _, f := range s.Fields {
		if f.JSON == json {
			return f
		}
	}
	return nil
}

// check verifies every field a generated codec handles has a type it knows.
func (s *Schema) check() error {
	for _, k := range s.Kinds {
		b := k.Body
		if b.Binary != nil {
			for _, f := range b.Binary {
				if _, err := s.wireType(f.Type); err != nil {
					return fmt.Errorf("parse schema: %s.%s: binary layout: %w", b.Name, f.Go, err)
				}
			}
		}
		if b.FastJSON {
			for _, f := range b.Fields {
				if _, err := s.fastDecoder(f.Type); err != nil {
					return fmt.Errorf("parse schema: %s.%s: JSON fast path: %w", b.Name, f.Go, err)
				}
			}
		}
		for _, f := range b.Fields {
			for _, c := range f.Checks {
				if c.Op == "maxlen" {
					if _, ok := s.consts[c.Arg]; !ok {
						return fmt.Errorf("parse schema: %s.%s: maxlen=%s: no such constant in event.go", b.Name, f.Go, c.Arg)
					}
				}
			}
		}
	}
	if _, ok := s.Structs["Source"]; !ok {
		return fmt.Errorf("parse schema: no Source struct")
	}
	for _, f := range s.Structs["Source"].Fields {
		if _, err := s.fastDecoder(f.Type); err != nil {
			return fmt.Errorf("parse schema: Source.%s: JSON fast path: %w", f.Go, err)
		}
	}
	return nil
}

// basic resolves a type expression to a basic type name ("string",
// "uint64", …) and the named type over it ("Side"; "" when unnamed).
func (s *Schema) basic(e ast.Expr) (basic, named string) {
	id, ok := e.(*ast.Ident)
	if !ok {
		return "", ""
	}
	switch id.Name {
	case "string", "int", "int64", "int32", "uint64", "uint32", "float64", "bool":
		return id.Name, ""
	}
	if u, ok := s.named[id.Name]; ok {
		if b, _ := s.basic(u); b != "" {
			return b, id.Name
		}
	}
	return "", id.Name
}

func typeString(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.ArrayType:
		return "[]" + typeString(t.Elt)
	case *ast.MapType:
		return "map[" + typeString(t.Key) + "]" + typeString(t.Value)
	case *ast.StarExpr:
		return "*" + typeString(t.X)
	}
	return fmt.Sprintf("%T", e)
}
